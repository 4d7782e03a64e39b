package localserve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// Paths the server answers.
const (
	PathChat   = "/v1/chat/completions"
	PathModels = "/v1/models"
	PathLoad   = "/v1/load_lora_adapter"
	PathUnload = "/v1/unload_lora_adapter"
	PathHealth = "/health"
)

// CheckpointFile is the name the finetune local backend gives its
// checkpoint, and the one LoadPath prefers in a directory.
const CheckpointFile = "model.whalelm"

// maxBody bounds a request body; conversations for a byte model with a
// context of a few hundred tokens are far smaller.
const maxBody = 8 << 20

// Options tune a Server. Zero values take the defaults noted.
type Options struct {
	// Name is the base model's served name. Required.
	Name string
	// Root is reported as the base's "root" in /v1/models (its path).
	Root string
	// Window is the quiet time that closes a batch (at most 5 Windows
	// after its first request); default 2 ms.
	Window time.Duration
	// MaxBatch bounds the requests decoded in one Generate call; default 64.
	MaxBatch int
	// NoTruncate answers 400 to a prompt that does not fit the context
	// instead of dropping its oldest tokens after <|bos|>.
	NoTruncate bool
	// Resolve, when set, is asked for a model name the server does not
	// hold; a model it returns is then served under that name as if
	// loaded with /v1/load_lora_adapter (root says where it came from).
	// It restores fine-tuned checkpoints after a restart. A nil model
	// means "no such model" (404).
	Resolve func(ctx context.Context, name string) (m *local.Model, root string, err error)
	Log     *slog.Logger // default slog.Default()
}

// Server is an http.Handler serving a base model and the checkpoints loaded
// next to it. Close stops its batcher.
type Server struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	mu        sync.RWMutex
	models    map[string]*served
	resolving sync.Mutex // one Resolve at a time, so a name loads once

	queue  chan *job
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	calls  atomic.Int64 // batched Generate calls so far; the tests read it
	ids    atomic.Uint64
}

type served struct {
	name, parent, root, digest string
	m                          *local.Model
	created                    int64
}

type job struct {
	model  *served
	prompt []int
	opts   local.SampleOptions
	stop   []string
	res    chan result // buffered: the batcher never blocks on a gone client
}

type result struct {
	gen local.Generation
	err error
}

// New serves base under o.Name and starts the batcher.
func New(base *local.Model, o Options) (*Server, error) {
	if base == nil {
		return nil, errors.New("localserve: no base model")
	}
	if strings.TrimSpace(o.Name) == "" {
		return nil, errors.New("localserve: the served name is empty")
	}
	if o.Window <= 0 {
		o.Window = 2 * time.Millisecond
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	s := &Server{opts: o, log: o.Log, models: map[string]*served{}, queue: make(chan *job), done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.models[o.Name] = &served{name: o.Name, root: o.Root, digest: base.Digest(), m: base, created: time.Now().Unix()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST "+PathChat, s.chat)
	s.mux.HandleFunc("GET "+PathModels, s.listModels)
	s.mux.HandleFunc("POST "+PathLoad, s.load)
	s.mux.HandleFunc("POST "+PathUnload, s.unload)
	s.mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	go s.batcher()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Close stops the batcher; requests waiting or decoding fail with 503.
func (s *Server) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// LoadPath loads a checkpoint from a file, or from a directory holding
// CheckpointFile or exactly one checkpoint file (found by its magic).
func LoadPath(path string) (*local.Model, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	if !fi.IsDir() {
		return local.Load(path)
	}
	if p := filepath.Join(path, CheckpointFile); fileExists(p) {
		return local.Load(p)
	}
	var found []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if isCheckpoint(p) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load checkpoint from %s: %w", path, err)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("load checkpoint from %s: found %d checkpoint files, want one (or %s)", path, len(found), CheckpointFile)
	}
	return local.Load(found[0])
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isCheckpoint(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == "WHALELM1"
}

// HTTPServer is a Server listening on a TCP address.
type HTTPServer struct {
	*Server
	// URL is the OpenAI base URL, http://host:port/v1.
	URL      string
	srv      *http.Server
	done     chan struct{} // closed when Serve returns
	serveErr error
}

// Listen serves s on addr (host:port; port 0 picks one) until Shutdown.
func Listen(addr string, s *Server) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("localserve: listen %s: %w", addr, err)
	}
	h := &HTTPServer{Server: s, URL: "http://" + ln.Addr().String() + "/v1", done: make(chan struct{}),
		srv: &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		h.serveErr = h.srv.Serve(ln)
		close(h.done)
	}()
	return h, nil
}

// Shutdown stops accepting, waits for requests in flight (bounded by ctx)
// and closes the Server.
func (h *HTTPServer) Shutdown(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	h.Server.Close()
	<-h.done
	if !errors.Is(h.serveErr, http.ErrServerClosed) && err == nil {
		err = h.serveErr
	}
	return err
}

// Wait blocks until the listener fails (its error) or Shutdown is called
// (http.ErrServerClosed).
func (h *HTTPServer) Wait() error {
	<-h.done
	return h.serveErr
}

// --- wire types ---

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls,omitempty"`
}

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	N                   *int            `json:"n"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// apiError writes an OpenAI-style error body.
func apiError(w http.ResponseWriter, status int, typ, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": fmt.Sprintf(format, args...), "type": typ, "code": status}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("body larger than %d bytes", maxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// --- chat ---

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	if req.Stream {
		apiError(w, http.StatusBadRequest, "BadRequestError", "stream is not supported by whale's local server: send \"stream\": false")
		return
	}
	if req.N != nil && *req.N != 1 {
		apiError(w, http.StatusBadRequest, "BadRequestError", "n = %d: the local server returns one choice per request", *req.N)
		return
	}
	sv, err := s.resolve(r.Context(), req.Model)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "InternalServerError", "model %q: %v", req.Model, err)
		return
	}
	if sv == nil {
		apiError(w, http.StatusNotFound, "NotFoundError", "The model `%s` does not exist.", req.Model)
		return
	}
	msgs, err := toMessages(req.Messages)
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	j, err := s.makeJob(sv, msgs, &req)
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	select {
	case s.queue <- j:
	case <-r.Context().Done():
		return
	case <-s.ctx.Done():
		apiError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
		return
	}
	var res result
	select {
	case res = <-j.res:
	case <-r.Context().Done():
		return
	}
	if res.err != nil {
		if s.ctx.Err() != nil {
			apiError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
			return
		}
		apiError(w, http.StatusInternalServerError, "InternalServerError", "%v", res.err)
		return
	}
	g := res.gen
	text, reason, completion := g.Text, g.FinishReason, g.CompletionTokens
	if cut, ok := cutStop(text, j.stop); ok {
		text, reason, completion = text[:cut.at], "stop", cut.at+cut.n
	}
	resp := chatResponse{
		ID:      fmt.Sprintf("chatcmpl-%d", s.ids.Add(1)),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   sv.name,
		Choices: []chatChoice{{FinishReason: reason}},
		Usage:   usage{PromptTokens: g.PromptTokens, CompletionTokens: completion, TotalTokens: g.PromptTokens + completion},
	}
	resp.Choices[0].Message.Role = "assistant"
	resp.Choices[0].Message.Content = text
	writeJSON(w, resp)
}

type stopCut struct{ at, n int }

// cutStop finds the earliest stop sequence in text; byte tokens make the
// text's byte offsets token counts.
func cutStop(text string, stops []string) (stopCut, bool) {
	best, ok := stopCut{at: len(text) + 1}, false
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && i < best.at {
			best, ok = stopCut{at: i, n: len(st)}, true
		}
	}
	return best, ok
}

func (s *Server) lookup(name string) *served {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if name == "" {
		name = s.opts.Name
	}
	return s.models[name]
}

// resolve is lookup, then Options.Resolve for a name not held.
func (s *Server) resolve(ctx context.Context, name string) (*served, error) {
	if sv := s.lookup(name); sv != nil || s.opts.Resolve == nil {
		return sv, nil
	}
	s.resolving.Lock()
	defer s.resolving.Unlock()
	if sv := s.lookup(name); sv != nil {
		return sv, nil
	}
	m, root, err := s.opts.Resolve(ctx, name)
	if err != nil || m == nil {
		return nil, err
	}
	sv := &served{name: name, parent: s.opts.Name, root: root, digest: m.Digest(), m: m, created: time.Now().Unix()}
	s.mu.Lock()
	if old, ok := s.models[name]; ok {
		sv = old
	} else {
		s.models[name] = sv
	}
	s.mu.Unlock()
	s.log.Info("localserve: checkpoint resolved", "name", name, "root", root, "digest", sv.digest)
	return sv, nil
}

func toMessages(in []wireMessage) ([]schemas.Message, error) {
	if len(in) == 0 {
		return nil, errors.New("messages is empty")
	}
	out := make([]schemas.Message, len(in))
	for i, m := range in {
		text, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		sm := schemas.Message{Role: m.Role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			args := string(tc.Function.Arguments)
			// Arguments are JSON text in a string; a server may also get
			// them as an object.
			var str string
			if json.Unmarshal(tc.Function.Arguments, &str) == nil {
				args = str
			}
			sm.ToolCalls = append(sm.ToolCalls, schemas.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		out[i] = sm
	}
	return out, nil
}

// contentText accepts a string, null, or a list of parts of which the text
// ones are concatenated.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or a list of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("part %d has type %q; the local model reads text only", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("stop: want a string or a list of strings")
	}
	return many, nil
}

func (s *Server) makeJob(sv *served, msgs []schemas.Message, req *chatRequest) (*job, error) {
	ids, _, err := local.Encode(msgs, true)
	if err != nil {
		return nil, err
	}
	ctxLen := sv.m.Config().Context
	o := local.SampleOptions{Temperature: 1}
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		o.TopP = *req.TopP
	}
	if req.TopK != nil && *req.TopK > 0 {
		o.TopK = *req.TopK
	}
	if o.Temperature < 0 || o.Temperature > 100 || o.TopP < 0 || o.TopP > 1 || (req.TopK != nil && *req.TopK < -1) {
		return nil, fmt.Errorf("temperature %v, top_p %v or top_k out of range", o.Temperature, o.TopP)
	}
	maxTok := int64(ctxLen)
	switch {
	case req.MaxTokens != nil:
		maxTok = *req.MaxTokens
	case req.MaxCompletionTokens != nil:
		maxTok = *req.MaxCompletionTokens
	}
	if maxTok < 1 {
		return nil, fmt.Errorf("max_tokens %d: want ≥ 1", maxTok)
	}
	o.MaxNewTokens = int(min(maxTok, int64(ctxLen)))
	if req.Seed != nil {
		o.Seed = uint64(*req.Seed)
	} else {
		var b [8]byte
		rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:])
	}
	stop, err := parseStop(req.Stop)
	if err != nil {
		return nil, err
	}
	if len(ids) >= ctxLen {
		if s.opts.NoTruncate {
			return nil, fmt.Errorf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", ctxLen, len(ids))
		}
		ids = truncate(ids, ctxLen-min(o.MaxNewTokens, ctxLen/4))
	}
	return &job{model: sv, prompt: ids, opts: o, stop: stop, res: make(chan result, 1)}, nil
}

// truncate keeps <|bos|> and the last keep-1 tokens.
func truncate(ids []int, keep int) []int {
	keep = max(keep, 2)
	if len(ids) <= keep {
		return ids
	}
	return append([]int{ids[0]}, ids[len(ids)-keep+1:]...)
}

// --- batching ---

func (s *Server) batcher() {
	defer close(s.done)
	for {
		var batch []*job
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.queue:
			batch = append(batch, j)
		}
		// Requests that queued while the last batch decoded join at once;
		// then the batch closes after a quiet Window, or 5 Windows in all,
		// so a burst spread by HTTP handling still decodes as one batch.
		timer := time.NewTimer(s.opts.Window)
		deadline := time.Now().Add(5 * s.opts.Window)
	collect:
		for len(batch) < s.opts.MaxBatch {
			select {
			case j := <-s.queue:
				batch = append(batch, j)
				timer.Reset(min(s.opts.Window, time.Until(deadline)))
			case <-timer.C:
				break collect
			case <-s.ctx.Done():
				break collect
			}
		}
		timer.Stop()
		s.run(batch)
	}
}

// run decodes a batch, one Generate call per served model.
func (s *Server) run(batch []*job) {
	groups := map[*served][]*job{}
	var order []*served
	for _, j := range batch {
		if groups[j.model] == nil {
			order = append(order, j.model)
		}
		groups[j.model] = append(groups[j.model], j)
	}
	for _, sv := range order {
		js := groups[sv]
		prompts := make([][]int, len(js))
		opts := make([]local.SampleOptions, len(js))
		for i, j := range js {
			prompts[i], opts[i] = j.prompt, j.opts
		}
		s.calls.Add(1)
		start := time.Now()
		gens, err := sv.m.GenerateEach(s.ctx, prompts, opts)
		if err == nil {
			tokens := 0
			for _, g := range gens {
				tokens += g.CompletionTokens
			}
			s.log.Debug("localserve: batch decoded", "model", sv.name, "requests", len(js), "tokens", tokens, "seconds", time.Since(start).Seconds())
		}
		for i, j := range js {
			if err != nil {
				j.res <- result{err: err}
			} else {
				j.res <- result{gen: gens[i]}
			}
		}
	}
}

// --- models and adapters ---

type modelCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
	Digest  string  `json:"digest"`
	MaxLen  int     `json:"max_model_len"`
}

func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	cards := make([]modelCard, 0, len(s.models))
	for _, sv := range s.models {
		c := modelCard{ID: sv.name, Object: "model", Created: sv.created, OwnedBy: "whale", Root: sv.root, Digest: sv.digest, MaxLen: sv.m.Config().Context}
		if sv.parent != "" {
			p := sv.parent
			c.Parent = &p
		}
		cards = append(cards, c)
	}
	s.mu.RUnlock()
	sort.Slice(cards, func(a, b int) bool {
		if (cards[a].Parent == nil) != (cards[b].Parent == nil) {
			return cards[a].Parent == nil
		}
		return cards[a].ID < cards[b].ID
	})
	writeJSON(w, map[string]any{"object": "list", "data": cards})
}

type loraRequest struct {
	Name string `json:"lora_name"`
	Path string `json:"lora_path"`
}

func (s *Server) load(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := decodeBody(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	if req.Name == "" || req.Path == "" {
		apiError(w, http.StatusBadRequest, "BadRequestError", "both lora_name and lora_path must be provided")
		return
	}
	if s.lookup(req.Name) != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "The lora adapter '%s' has already been loaded.", req.Name)
		return
	}
	// Loading reads and verifies the whole file; it runs outside the lock
	// so requests keep flowing.
	m, err := LoadPath(req.Path)
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "load lora adapter %q: %v", req.Name, err)
		return
	}
	if m.Config().Vocab != local.TokenizerVocab {
		apiError(w, http.StatusBadRequest, "BadRequestError", "load lora adapter %q: vocab %d is not the byte tokenizer's %d", req.Name, m.Config().Vocab, local.TokenizerVocab)
		return
	}
	s.mu.Lock()
	if _, ok := s.models[req.Name]; ok {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "BadRequestError", "The lora adapter '%s' has already been loaded.", req.Name)
		return
	}
	s.models[req.Name] = &served{name: req.Name, parent: s.opts.Name, root: req.Path, digest: m.Digest(), m: m, created: time.Now().Unix()}
	s.mu.Unlock()
	s.log.Info("localserve: checkpoint loaded", "name", req.Name, "path", req.Path, "digest", m.Digest())
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

func (s *Server) unload(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := decodeBody(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	if req.Name == s.opts.Name {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%q is the base model, not an adapter", req.Name)
		return
	}
	s.mu.Lock()
	_, ok := s.models[req.Name]
	delete(s.models, req.Name)
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "NotFoundError", "The lora adapter '%s' cannot be found.", req.Name)
		return
	}
	s.log.Info("localserve: checkpoint unloaded", "name", req.Name)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}
