package localserve

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

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
