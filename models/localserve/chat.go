package localserve

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/httpguard"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/openai"
	"github.com/whalerun/whale/schemas"
)

// apiError writes an OpenAI-style error body.
func apiError(w http.ResponseWriter, status int, typ, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(openai.ErrorResponse{Error: openai.ErrorBody{Message: fmt.Sprintf(format, args...), Type: typ, Code: status}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// decodeBody reads the JSON body into v; on failure it answers the
// request (413 past maxBody, 408 when the client sent it too slowly, 400
// otherwise) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		apiError(w, http.StatusRequestEntityTooLarge, "BadRequestError", "%s", httpguard.TooLarge(mbe.Limit))
		return false
	case errors.As(err, &ne) && ne.Timeout():
		w.Header().Set("Connection", "close")
		apiError(w, http.StatusRequestTimeout, "BadRequestError", "the request body did not arrive in time")
		return false
	case err != nil:
		apiError(w, http.StatusBadRequest, "BadRequestError", "read body: %v", err)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: %v", err)
		return false
	}
	return true
}

// timedOut answers a request whose deadline (Options.RequestTimeout)
// passed: 503 with Retry-After, the server being too busy to answer in
// time. A client that went away gets nothing.
func (s *Server) timedOut(w http.ResponseWriter, r *http.Request) {
	if !httpguard.TimedOut(r) {
		return
	}
	w.Header().Set("Retry-After", "1")
	apiError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "no reply within the server's request timeout of %v; the server is busy, retry later", s.opts.RequestTimeout)
}

// --- chat ---

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatRequest
	if !decodeBody(w, r, &req) {
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
	if err != nil && r.Context().Err() != nil {
		s.timedOut(w, r)
		return
	}
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
		s.timedOut(w, r)
		return
	case <-s.ctx.Done():
		apiError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
		return
	}
	var res result
	select {
	case res = <-j.res:
	case <-r.Context().Done():
		s.timedOut(w, r)
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
func (s *Server) reply(sv *served, j *job, g local.Generation) openai.ChatCompletion {
	text, reason, completion := g.Text, g.FinishReason, g.CompletionTokens
	stopReason := ""
	if cut, ok := cutStop(text, j.stop); ok {
		text, reason, completion, stopReason = text[:cut.at], "stop", cut.at+cut.n, text[cut.at:cut.at+cut.n]
	}
	if j.tools.choice == choiceNamed {
		// One call of the named tool, as vLLM's named function calling
		// returns: the reply ends with the first </tool_call>.
		if i := strings.Index(text, local.ToolCallClose); i >= 0 {
			n := i + len(local.ToolCallClose)
			text, reason, completion, stopReason = text[:n], "stop", n, ""
		}
	}
	text = j.prefill + text
	prompt, done := int64(g.PromptTokens), int64(completion)
	resp := openai.ChatCompletion{
		ID:      fmt.Sprintf("chatcmpl-%d", s.ids.Add(1)),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   sv.name,
		// stop_reason is the stop string that ended the reply, null
		// otherwise: the end token is not a stop string.
		Choices: []openai.Choice{{FinishReason: reason, StopReason: openai.StopReasonOf(stopReason)}},
		Usage:   &openai.Usage{PromptTokens: prompt, CompletionTokens: done, TotalTokens: prompt + done},
	}
	msg := &resp.Choices[0].Message
	msg.Role = "assistant"
	msg.Content = (*openai.Content)(&text)
	msg.ToolCalls = []openai.ToolCall{}
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
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: c.ID, Type: "function",
			Function: openai.FunctionCall{Name: c.Name, Arguments: openai.Arguments(c.Arguments)}})
	}
	switch j.tools.choice {
	case choiceAuto:
		// vLLM: null content when there is no text before the first call,
		// and finish_reason "tool_calls" whatever ended the decoding.
		msg.Content = nil
		if content != "" {
			msg.Content = (*openai.Content)(&content)
		}
		resp.Choices[0].FinishReason = "tool_calls"
	case choiceRequired:
		msg.Content = (*openai.Content)(&content)
		if reason == "stop" {
			resp.Choices[0].FinishReason = "tool_calls"
		}
	case choiceNamed:
		// vLLM (and OpenAI): "" content and the decoder's finish reason,
		// "stop", for a named call.
		msg.Content = (*openai.Content)(&content)
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

func toMessages(in []openai.Message) ([]schemas.Message, error) {
	if len(in) == 0 {
		return nil, errors.New("messages is empty")
	}
	out := make([]schemas.Message, len(in))
	for i, m := range in {
		sm := schemas.Message{Role: m.Role, Content: m.Content.String(), Name: m.Name, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			sm.ToolCalls = append(sm.ToolCalls, schemas.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
		}
		out[i] = sm
	}
	return out, nil
}

func (s *Server) makeJob(sv *served, msgs []schemas.Message, req *openai.ChatRequest) (*job, error) {
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
	stop := []string(req.Stop)
	if slices.Contains(stop, "") {
		return nil, errors.New("stop cannot contain an empty string.")
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
