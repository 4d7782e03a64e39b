package modeltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models/openai"
	"github.com/whalerun/whale/schemas"
)

// Fault is a way for the fake server to misbehave on one call.
type Fault string

const (
	// FaultNone answers normally.
	FaultNone Fault = ""
	// FaultRateLimit answers 429 with Retry-After: Reply.RetryAfter.
	FaultRateLimit Fault = "rate_limit"
	// FaultServerError answers 500.
	FaultServerError Fault = "server_error"
	// FaultUnavailable answers 503 (with Retry-After if Reply.RetryAfter is set).
	FaultUnavailable Fault = "unavailable"
	// FaultStatus answers Reply.Status with an OpenAI-style error body
	// (Reply.Body replaces it when set).
	FaultStatus Fault = "status"
	// FaultDrop hijacks the connection and closes it before writing anything.
	FaultDrop Fault = "drop"
	// FaultDropMidBody sends the headers (with the full Content-Length) and
	// half of a valid body, then closes the connection.
	FaultDropMidBody Fault = "drop_mid_body"
	// FaultMalformed answers 200 application/json with a body that is not JSON.
	FaultMalformed Fault = "malformed"
	// FaultTruncated answers 200 with the first half of a valid body and a
	// Content-Length that matches it: well framed, but not whole JSON.
	FaultTruncated Fault = "truncated"
	// FaultEmptyChoices answers 200 with "choices": [].
	FaultEmptyChoices Fault = "empty_choices"
)

// ToolCall is a native tool call in a reply. An empty ID leaves the "id"
// key out of the call (a server that forgot it); Arguments is sent as
// given, JSON or not, and Name need not be one of the request's tools.
type ToolCall = schemas.ToolCall

// Reply is what the fake server does for one call.
type Reply struct {
	Content string
	// Reasoning is sent as message.reasoning_content when set (or under
	// ReasoningField).
	Reasoning string
	// ReasoningField is the key Reasoning goes under; default
	// "reasoning_content". Newer vLLM releases send "reasoning".
	ReasoningField string
	ToolCalls      []ToolCall
	// RawToolCalls, when set, is sent as message.tool_calls in place of
	// ToolCalls: JSON (it must be JSON; a body that is not is
	// FaultMalformed) for shapes a ToolCall cannot take: arguments as an
	// object, no type, no function, a string where a list belongs, null.
	RawToolCalls string
	// FinishReason defaults to "tool_calls" when ToolCalls or RawToolCalls
	// are set, else "stop".
	FinishReason string
	// StopReason is the choice's stop_reason, as vLLM reports it: the stop
	// string (a string) or stop token id (an int) that ended the reply;
	// nil sends null, what vLLM sends for any other end, the end-of-text
	// token included.
	StopReason any
	// Model is the model id reported; default: the request's model.
	Model string
	// PromptTokens and CompletionTokens are the usage reported; when both
	// are 0 the server reports word counts of the prompt and the content.
	PromptTokens     int64
	CompletionTokens int64
	// NoUsage leaves the usage object out.
	NoUsage bool
	// PromptTokenIDs and TokenIDs, when set, are sent as vLLM does for a
	// request with return_token_ids: the prompt's ids at the top level,
	// the completion's in the choice.
	PromptTokenIDs, TokenIDs []int

	Fault Fault
	// Status is the HTTP status for FaultStatus.
	Status int
	// RetryAfter is the Retry-After header value for FaultRateLimit
	// (default "0") and FaultUnavailable (none by default).
	RetryAfter string
	// Body replaces the error body of FaultStatus.
	Body string
	// Delay is waited before anything is written (slow server). The wait
	// ends early if the client goes away or the server closes.
	Delay time.Duration
}

// Handler decides the reply to one recorded request.
type Handler func(req *Request) Reply

// Script replies with replies[i] to the (i+1)-th call and repeats the last
// reply after the script runs out.
func Script(replies ...Reply) Handler {
	if len(replies) == 0 {
		panic("modeltest: Script needs at least one reply")
	}
	return func(req *Request) Reply {
		return replies[min(req.Call, len(replies))-1]
	}
}

// Always gives the same reply to every call.
func Always(r Reply) Handler { return func(*Request) Reply { return r } }

// Message is a chat message as the server decoded it.
type Message = schemas.Message

// Tool is a function tool as the server decoded it.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
}

// Request is one recorded call.
type Request struct {
	// Call is the 1-based arrival order among all calls of this server.
	Call   int
	Method string
	Path   string
	Header http.Header
	// Raw is the body as sent.
	Raw []byte
	// Body is the body decoded into a map: every field, extras included.
	Body     map[string]any
	Model    string
	Messages []Message
	Tools    []Tool
}

// Server is a running fake. Its zero value is not usable; call NewServer.
type Server struct {
	// URL is the base URL to give a client, ending in /v1.
	URL string

	ts   *httptest.Server
	done chan struct{}
	once sync.Once

	mu          sync.Mutex
	handler     Handler
	noRecord    bool
	reqs        []Request
	calls       int
	inFlight    int
	maxInFlight int
	slots       *schedule // nil: unbounded
	vllm        *VLLM     // nil: not a fake vLLM (see Server.VLLM)
	running     int
	maxRunning  int
	held, late  time.Duration
}

// NewServer starts a fake server on loopback that replies with h, and closes
// it when the test ends.
func NewServer(t testing.TB, h Handler) *Server {
	t.Helper()
	s := &Server{handler: h, done: make(chan struct{})}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL + "/v1"
	t.Cleanup(s.Close)
	return s
}

// Close stops the server; delayed replies are abandoned. Safe to call twice.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
}

// SetHandler replaces the handler for later calls.
func (s *Server) SetHandler(h Handler) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// Record turns the recording of requests on or off; it is on from the
// start. With it off, calls are still counted and Requests returns what was
// recorded before. Benchmarks turn it off: a long run's recorded bodies
// grow the heap and make garbage collection, not the code under test, set
// the pace.
func (s *Server) Record(on bool) {
	s.mu.Lock()
	s.noRecord = !on
	s.mu.Unlock()
}

// SetSlots makes the server process at most n calls at once, as a vLLM
// server with max_num_seqs=n does: a call waits for a free slot (it is
// queued, not rejected, in arrival order), then its reply's Delay runs,
// then it frees the slot and the reply is written. A slot's calls follow
// each other exactly, in model time (see schedule): with
// Always(Reply{Delay: d}) the server serves n/d calls per second to a
// client that keeps it busy, however late its own goroutines wake. n <= 0
// removes the bound. Calls already waiting keep the slots they were
// queued on.
func (s *Server) SetSlots(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots = nil
	if n > 0 {
		s.slots = newSchedule(n)
	}
}

// Requests returns a copy of the requests recorded so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Calls counts the chat completion calls received so far.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// MaxInFlight is the most chat completion calls the server was handling at
// once, those waiting for a slot (see SetSlots) included.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight
}

// Held is the time calls spent holding a slot so far, summed over the
// calls: with slots (see SetSlots) their Delays, without them the time
// spent waiting for their Delays.
func (s *Server) Held() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Late is how much later than their slots' ends (see SetSlots) the
// server got to writing replies, summed over the calls: the timer's and
// the goroutine's wake-up, which a busy machine delays.
func (s *Server) Late() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

// MaxRunning is the most chat completion calls that held a slot at once
// (see SetSlots); without slots, every call holds one while it is handled.
func (s *Server) MaxRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRunning
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v := s.vllm
	s.mu.Unlock()
	if v != nil && v.handle(w, r) {
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{"id": "modeltest", "object": "model"}}})
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	req := &Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	decodeErr := decode(req)

	s.mu.Lock()
	s.calls++
	req.Call = s.calls
	if !s.noRecord {
		s.reqs = append(s.reqs, *req)
	}
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	h := s.handler
	slots := s.slots
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	if decodeErr != nil {
		writeError(w, http.StatusBadRequest, decodeErr.Error())
		return
	}
	if v != nil && !v.serves(req.Model) {
		writeVLLMError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	rep := h(req)
	if !s.process(r, slots, rep.Delay) {
		return
	}
	s.reply(w, req, rep)
}

// process waits for a slot (nil: no bound) and for delay. It returns
// false if the client went away meanwhile; it aborts the handler if the
// server closes.
func (s *Server) process(r *http.Request, slots *schedule, delay time.Duration) bool {
	var end time.Time
	s.mu.Lock()
	if slots != nil {
		// Taken under the lock: bookings must see arrival times in order.
		var running int
		_, end, running = slots.book(time.Now(), delay)
		s.maxRunning = max(s.maxRunning, running)
		s.held += delay
	} else {
		s.running++
		s.maxRunning = max(s.maxRunning, s.running)
	}
	s.mu.Unlock()
	start := time.Now()
	defer func() {
		now := time.Now()
		s.mu.Lock()
		if slots != nil {
			s.late += max(0, now.Sub(end))
		} else {
			s.running--
			s.held += now.Sub(start)
		}
		s.mu.Unlock()
	}()
	wait := delay
	if slots != nil {
		wait = time.Until(end)
	}
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.done:
		// Returning would let net/http send an empty 200 before Close
		// drops the connection; aborting sends nothing.
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) reply(w http.ResponseWriter, req *Request, rep Reply) {
	switch rep.Fault {
	case FaultNone:
		writeRaw(w, http.StatusOK, completion(req, rep, true))
	case FaultRateLimit:
		ra := rep.RetryAfter
		if ra == "" {
			ra = "0"
		}
		w.Header().Set("Retry-After", ra)
		writeError(w, http.StatusTooManyRequests, "rate limited")
	case FaultServerError:
		writeError(w, http.StatusInternalServerError, "internal server error")
	case FaultUnavailable:
		if rep.RetryAfter != "" {
			w.Header().Set("Retry-After", rep.RetryAfter)
		}
		writeError(w, http.StatusServiceUnavailable, "service unavailable")
	case FaultStatus:
		if rep.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rep.Status)
			_, _ = io.WriteString(w, rep.Body)
			return
		}
		writeError(w, rep.Status, http.StatusText(rep.Status))
	case FaultDrop:
		hijackClose(w, nil)
	case FaultDropMidBody:
		body := completion(req, rep, true)
		var b bytes.Buffer
		fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		b.Write(body[:len(body)/2])
		hijackClose(w, b.Bytes())
	case FaultMalformed:
		writeRaw(w, http.StatusOK, []byte(`{"id": "chatcmpl-x", "choices": [ this is not json`))
	case FaultTruncated:
		body := completion(req, rep, true)
		writeRaw(w, http.StatusOK, body[:len(body)/2])
	case FaultEmptyChoices:
		writeRaw(w, http.StatusOK, completion(req, rep, false))
	default:
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("modeltest: unknown fault %q", rep.Fault))
	}
}

// hijackClose takes over the connection, writes prefix if any, and closes it.
func hijackClose(w http.ResponseWriter, prefix []byte) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("modeltest: response writer cannot be hijacked")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if len(prefix) > 0 {
		_, _ = buf.Write(prefix)
		_ = buf.Flush()
	}
	_ = conn.Close()
}

// decode fills the decoded views of req.Raw; an error means the body is
// not a chat completion request (the server then answers 400).
func decode(req *Request) error {
	if err := json.Unmarshal(req.Raw, &req.Body); err != nil {
		return fmt.Errorf("body is not a JSON object: %v", err)
	}
	var v openai.ChatRequest
	if err := json.Unmarshal(req.Raw, &v); err != nil {
		return fmt.Errorf("body: %v", err)
	}
	if len(v.Messages) == 0 {
		return fmt.Errorf("messages: at least one is required")
	}
	req.Model = v.Model
	for _, m := range v.Messages {
		msg := Message{Role: m.Role, Content: m.Content.String(), Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.ReasoningContent}
		if msg.Reasoning == "" {
			msg.Reasoning = m.Reasoning
		}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
		}
		req.Messages = append(req.Messages, msg)
	}
	for i, t := range v.Tools {
		if t.Function == nil {
			return fmt.Errorf("tools[%d]: no function", i)
		}
		tool := Tool{Name: t.Function.Name, Description: t.Function.Description}
		if len(t.Function.Parameters) > 0 {
			if err := json.Unmarshal(t.Function.Parameters, &tool.Parameters); err != nil {
				return fmt.Errorf("tools[%d].function.parameters: %v", i, err)
			}
		}
		req.Tools = append(req.Tools, tool)
	}
	return nil
}

// completion renders a chat.completion body for rep.
func completion(req *Request, rep Reply, withChoice bool) []byte {
	model := rep.Model
	if model == "" {
		model = req.Model
	}
	content := openai.Content(rep.Content)
	msg := openai.ReplyMessage{Role: "assistant", Content: &content, ToolCalls: []openai.ToolCall{}}
	calls := len(rep.ToolCalls) > 0 || rep.RawToolCalls != ""
	for _, tc := range rep.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: tc.ID, Type: "function",
			Function: openai.FunctionCall{Name: tc.Name, Arguments: openai.Arguments(tc.Arguments)}})
	}
	if calls && rep.Content == "" {
		msg.Content = nil // what vLLM sends with tool calls
	}
	switch rep.ReasoningField {
	case "", "reasoning_content":
		msg.ReasoningContent = rep.Reasoning
	case "reasoning":
		msg.Reasoning = rep.Reasoning
	default:
		panic(fmt.Sprintf("modeltest: Reply.ReasoningField %q: want reasoning_content or reasoning", rep.ReasoningField))
	}
	finish := rep.FinishReason
	if finish == "" {
		finish = "stop"
		if calls {
			finish = "tool_calls"
		}
	}
	body := openai.ChatCompletion{
		ID:             "chatcmpl-modeltest-" + strconv.Itoa(req.Call),
		Object:         "chat.completion",
		Created:        1700000000 + int64(req.Call),
		Model:          model,
		Choices:        []openai.Choice{},
		PromptTokenIDs: int32s(rep.PromptTokenIDs),
	}
	if withChoice {
		stop, err := json.Marshal(rep.StopReason)
		if err != nil {
			panic(fmt.Sprintf("modeltest: Reply.StopReason %v: %v", rep.StopReason, err))
		}
		body.Choices = append(body.Choices, openai.Choice{Message: msg, FinishReason: finish, StopReason: stop,
			TokenIDs: int32s(rep.TokenIDs), Logprobs: json.RawMessage("null")})
	}
	if !rep.NoUsage {
		pt, ct := rep.PromptTokens, rep.CompletionTokens
		if pt == 0 && ct == 0 {
			for _, m := range req.Messages {
				pt += int64(len(strings.Fields(m.Content)))
			}
			ct = int64(len(strings.Fields(rep.Content)))
		}
		body.Usage = &openai.Usage{PromptTokens: pt, CompletionTokens: ct, TotalTokens: pt + ct}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	raw := rep.RawToolCalls
	if raw == "" && slices.ContainsFunc(rep.ToolCalls, func(tc ToolCall) bool { return tc.ID == "" }) {
		raw = callsWithoutIDs(rep.ToolCalls)
	}
	if raw != "" && withChoice {
		b = withRawToolCalls(b, raw)
	}
	return b
}

// callsWithoutIDs is calls as JSON with the "id" key left out where the
// ID is empty: a server that forgot it.
func callsWithoutIDs(calls []ToolCall) string {
	list := make([]map[string]any, len(calls))
	for i, tc := range calls {
		list[i] = map[string]any{"type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
		if tc.ID != "" {
			list[i]["id"] = tc.ID
		}
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// withRawToolCalls puts raw in place of the first choice's
// message.tool_calls of the body b: shapes no openai.ToolCall can take.
func withRawToolCalls(b []byte, raw string) []byte {
	if !json.Valid([]byte(raw)) {
		panic(fmt.Sprintf("modeltest: Reply.RawToolCalls is not JSON: %q", raw))
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		panic(err)
	}
	body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["tool_calls"] = json.RawMessage(raw)
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

func int32s(ids []int) []int32 {
	if ids == nil {
		return nil
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, b)
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, openai.ErrorResponse{Error: openai.ErrorBody{Message: msg, Type: http.StatusText(status), Code: status}})
}
