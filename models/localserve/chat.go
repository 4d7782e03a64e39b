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
	// Tools is nil when "tools" is absent or null.
	Tools      []wireTool      `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
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
		Role string `json:"role"`
		// Content is null when the reply is only tool calls (vLLM's
		// hermes parser under tool_choice "auto").
		Content   *string       `json:"content"`
		ToolCalls []outToolCall `json:"tool_calls"` // [] when none, as vLLM sends
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
	// StopReason is the stop string that ended the reply, null otherwise
	// (vLLM's field; the end token is not a stop string).
	StopReason *string `json:"stop_reason"`
}

type outToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"` // JSON text
	} `json:"function"`
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
	writeJSON(w, s.reply(sv, j, res.gen))
}

// reply turns a generation into the chat.completion body: stop strings
// first, then (when the request offered tools) tool calls, as vLLM
// applies its stop checker before its tool parser.
func (s *Server) reply(sv *served, j *job, g local.Generation) chatResponse {
	text, reason, completion := g.Text, g.FinishReason, g.CompletionTokens
	var stopReason *string
	if cut, ok := cutStop(text, j.stop); ok {
		st := text[cut.at : cut.at+cut.n]
		text, reason, completion, stopReason = text[:cut.at], "stop", cut.at+cut.n, &st
	}
	if j.tools.choice == choiceNamed {
		// One call of the named tool, as vLLM's named function calling
		// returns: the reply ends with the first </tool_call>.
		if i := strings.Index(text, local.ToolCallClose); i >= 0 {
			n := i + len(local.ToolCallClose)
			text, reason, completion, stopReason = text[:n], "stop", n, nil
		}
	}
	text = j.prefill + text
	resp := chatResponse{
		ID:      fmt.Sprintf("chatcmpl-%d", s.ids.Add(1)),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   sv.name,
		Choices: []chatChoice{{FinishReason: reason, StopReason: stopReason}},
		Usage:   usage{PromptTokens: g.PromptTokens, CompletionTokens: completion, TotalTokens: g.PromptTokens + completion},
	}
	msg := &resp.Choices[0].Message
	msg.Role = "assistant"
	msg.Content = &text
	msg.ToolCalls = []outToolCall{}
	if !j.tools.parse() {
		return resp
	}
	content, calls, ok := parseToolCalls(text)
	if !ok {
		if strings.Contains(text, local.ToolCallOpen) {
			s.log.Debug("localserve: tool call does not parse; the text is the content", "model", sv.name, "text", text)
		}
		return resp // hermes: a block that does not parse leaves the text as content
	}
	for _, c := range calls {
		var oc outToolCall
		oc.ID, oc.Type = c.ID, "function"
		oc.Function.Name, oc.Function.Arguments = c.Name, c.Arguments
		msg.ToolCalls = append(msg.ToolCalls, oc)
	}
	switch j.tools.choice {
	case choiceAuto:
		// vLLM: null content when there is no text before the first call,
		// and finish_reason "tool_calls" whatever ended the decoding.
		msg.Content = nil
		if content != "" {
			msg.Content = &content
		}
		resp.Choices[0].FinishReason = "tool_calls"
	case choiceRequired:
		msg.Content = &content
		if reason == "stop" {
			resp.Choices[0].FinishReason = "tool_calls"
		}
	case choiceNamed:
		// vLLM (and OpenAI): "" content and the decoder's finish reason,
		// "stop", for a named call.
		msg.Content = &content
	}
	return resp
}

type stopCut struct{ at, n int }

// cutStop finds the stop sequence that ends the text, as vLLM's stop
// checker does while decoding one token at a time: the one whose first
// match completes earliest, the first listed of those that complete at
// the same token. Byte tokens make the text's byte offsets token counts.
func cutStop(text string, stops []string) (stopCut, bool) {
	best, end, ok := stopCut{}, len(text)+1, false
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && i+len(st) < end {
			best, end, ok = stopCut{at: i, n: len(st)}, i+len(st), true
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
		if one == "" {
			return nil, errors.New("stop cannot contain an empty string.")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("stop: want a string or a list of strings")
	}
	for _, st := range many {
		if st == "" {
			return nil, errors.New("stop cannot contain an empty string.")
		}
	}
	return many, nil
}

func (s *Server) makeJob(sv *served, msgs []schemas.Message, req *chatRequest) (*job, error) {
	tools, err := parseToolSpec(req.Tools, req.Tools != nil, req.ToolChoice)
	if err != nil {
		return nil, err
	}
	ids, _, err := local.EncodeTools(msgs, tools.tools, true)
	if err != nil {
		return nil, err
	}
	prefill := tools.prefill()
	ids = append(ids, local.EncodeText(prefill)...)
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
	return &job{model: sv, prompt: ids, opts: o, stop: stop, tools: tools, prefill: prefill, res: make(chan result, 1)}, nil
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
