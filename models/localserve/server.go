package localserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/whalerun/whale/internal/httpguard"
	"github.com/whalerun/whale/models/local"
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
// context of a few hundred tokens are far smaller. A larger one is 413.
const maxBody = 8 << 20

// Defaults of the limits in Options.
const (
	DefaultMaxAdapterBytes = 1 << 30
	DefaultRequestTimeout  = 10 * time.Minute
	DefaultReadTimeout     = 30 * time.Second
	// The demo model keeps 2 KiB of keys and values per token: 128 MiB
	// holds the latest turn of 100 episodes of 600 tokens, twice what
	// whale demo --quick needs (64 MiB ran as fast, 32 MiB 16% slower).
	DefaultPrefixCacheBytes = 128 << 20
)

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

	// AdapterDir is the one directory /v1/load_lora_adapter loads
	// checkpoints from (see the package doc). Empty turns loading at runtime
	// off: the load and unload endpoints answer 404, as vLLM's do without
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING. The directory must exist.
	AdapterDir string
	// MaxAdapterBytes bounds a checkpoint file the load endpoint reads;
	// default DefaultMaxAdapterBytes (1 GiB). Loads run one at a time.
	MaxAdapterBytes int64
	// Token, when set, must come as "Authorization: Bearer TOKEN" with
	// every request but GET /health (401 otherwise).
	Token string
	// MaxInFlight bounds the requests being handled at once, chat
	// requests waiting for or in a batch included; more are refused with
	// 429 and Retry-After. Default 4 × MaxBatch, so batches still fill.
	MaxInFlight int
	// RequestTimeout bounds one request, a chat request's wait for its
	// batch and its decoding included; past it the answer is 503 with
	// Retry-After. Default DefaultRequestTimeout (10 min, the whale
	// client's own attempt timeout): long generations are slow on a CPU.
	RequestTimeout time.Duration
	// PrefixCacheBytes bounds the keys and values of recent sequences kept
	// so that a prompt extending one (an episode's next turn) is fed only
	// from where they part (local.PrefixCache); default
	// DefaultPrefixCacheBytes, negative turns the cache off.
	PrefixCacheBytes int64
	// ReadTimeout bounds reading one request, headers and body, on the
	// server Listen starts; default DefaultReadTimeout (30 s). Its write
	// timeout is ReadTimeout + RequestTimeout + 30 s, so a reply that
	// comes in time is never cut.
	ReadTimeout time.Duration
}

// Server is an http.Handler serving a base model and the checkpoints loaded
// next to it. Close stops its batcher.
type Server struct {
	opts    Options
	log     *slog.Logger
	handler http.Handler  // mux behind the guards
	adapter *adapterDir   // nil: loading at runtime is off
	loading chan struct{} // one adapter load at a time

	mu        sync.RWMutex
	models    map[string]*served
	resolving sync.Mutex // one Resolve at a time, so a name loads once

	queue  chan *job
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	calls  atomic.Int64       // batched Generate calls so far; the tests read it
	prefix *local.PrefixCache // nil when Options.PrefixCacheBytes < 0
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
	tools  toolSpec
	// prefill is the start of the assistant turn the server wrote (see
	// toolSpec.prefill); it ends the prompt and starts the reply's text.
	prefill string
	res     chan result // buffered: the batcher never blocks on a gone client
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
	if o.MaxAdapterBytes <= 0 {
		o.MaxAdapterBytes = DefaultMaxAdapterBytes
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4 * o.MaxBatch
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.PrefixCacheBytes == 0 {
		o.PrefixCacheBytes = DefaultPrefixCacheBytes
	}
	s := &Server{opts: o, log: o.Log, models: map[string]*served{}, queue: make(chan *job), done: make(chan struct{}),
		loading: make(chan struct{}, 1)}
	if o.PrefixCacheBytes > 0 {
		s.prefix = local.NewPrefixCache(o.PrefixCacheBytes)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.AdapterDir != "" {
		ad, err := openAdapterDir(o.AdapterDir)
		if err != nil {
			return nil, err
		}
		s.adapter = ad
	}
	s.models[o.Name] = &served{name: o.Name, root: o.Root, digest: base.Digest(), m: base, created: time.Now().Unix()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathChat, s.chat)
	mux.HandleFunc("GET "+PathModels, s.listModels)
	if s.adapter != nil {
		mux.HandleFunc("POST "+PathLoad, s.load)
		mux.HandleFunc("POST "+PathUnload, s.unload)
	} else {
		// vLLM registers neither route unless runtime LoRA updating is
		// allowed: any method is a 404.
		off := func(w http.ResponseWriter, _ *http.Request) {
			apiError(w, http.StatusNotFound, "NotFoundError", "Not Found: loading adapters at runtime is off; start the server with an adapter directory (whale local serve --adapter-dir DIR)")
		}
		mux.HandleFunc(PathLoad, off)
		mux.HandleFunc(PathUnload, off)
	}
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.handler = httpguard.Guard{
		Token:       o.Token,
		Open:        func(r *http.Request) bool { return r.URL.Path == PathHealth },
		JSON:        httpguard.JSONOnly,
		MaxBody:     maxBody,
		MaxInFlight: o.MaxInFlight,
		Timeout:     o.RequestTimeout,
		Refuse:      refuse,
	}.Wrap(mux)
	go s.batcher()
	return s, nil
}

// refuse writes a guard's refusal as an OpenAI-style error.
func refuse(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{
		http.StatusUnauthorized:          "AuthenticationError",
		http.StatusUnsupportedMediaType:  "BadRequestError",
		http.StatusRequestEntityTooLarge: "BadRequestError",
		http.StatusTooManyRequests:       "RateLimitError",
	}[status]
	if typ == "" {
		typ = http.StatusText(status)
	}
	apiError(w, status, typ, "%s", msg)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}

// Close stops the batcher; requests waiting or decoding fail with 503.
func (s *Server) Close() error {
	s.cancel()
	<-s.done
	if s.adapter != nil {
		s.adapter.close()
	}
	return nil
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
		srv: httpguard.NewServer(s, httpguard.Timeouts{Read: s.opts.ReadTimeout, Handle: s.opts.RequestTimeout})}
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
