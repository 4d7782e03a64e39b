package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
)

// Bounds on trace text. Traces go into every rollout row and into the
// proposer's workspace, so one long reply or tool result must not make a
// row megabytes; the transcript keeps the full text.
const (
	clipShort = 240  // replies, tool inputs and results, observations
	clipLong  = 2000 // hook events, errors with their backtrace
)

// Trace kinds; see the package doc.
const (
	KindHook    = "hook"
	KindModel   = "model"
	KindTool    = "tool"
	KindEnv     = "env"
	KindContext = "context"
	KindError   = "error"
)

// Run plays one episode of task: dom makes the environment, h decides what
// the model sees and how its replies are read, m answers. It never returns
// an error: every failure (model, hook, environment, a bad task) ends up in
// Result.Error with FinishReason FinishError, so that every episode becomes
// exactly one row. When ctx ends, the Result has FinishError and an Error
// that says so; callers that stop on ctx should drop it.
func Run(ctx context.Context, dom Domain, h *harness.Harness, m Chatter, task schemas.Task, cfg Config) Result {
	start := time.Now()
	l := &loop{ctx: ctx, dom: dom, m: m, task: task, cfg: cfg}
	l.h = h.WithRecorder(l.record)
	l.run()
	l.res.Latency = time.Since(start)
	return l.res
}

// loop is the state of one episode. It lives in one goroutine: the
// harness's recorder is called in the calling goroutine, so the trace needs
// no lock.
type loop struct {
	ctx  context.Context
	dom  Domain
	h    *harness.Harness // the episode's recording view
	m    Chatter
	task schemas.Task
	cfg  Config

	env   Env
	tools []models.Tool

	maxTurns, formatBudget, illegalBudget int
	sampling                              models.Sampling

	// st is the state hooks see; state() brings it up to date.
	st *harness.State
	// defaultSystem is SYSTEM_PROMPT as a message, nil when empty: the
	// head of the default context.
	defaultSystem *schemas.Message
	sysMsg        schemas.Message // what defaultSystem points to
	// system is what Result.Messages starts with: the system message of
	// the first call once there was one.
	system *schemas.Message
	called bool
	// all is the default context, SYSTEM_PROMPT's message then the
	// transcript (all[0] is unused when the prompt is empty), so that a
	// call with the default context and Result.Messages need no copy of
	// the transcript. transcript is all[1:]; push appends to both.
	all        []schemas.Message
	transcript []schemas.Message
	// deferred holds the user messages (observations) that follow a reply
	// with native tool calls: they must come after every tool message of
	// that reply, which chat templates require to follow it directly.
	deferred   []schemas.Message
	fmtRetries int
	illRetries int

	// args holds a hook call's arguments and seed a model call's seed, so
	// that neither is allocated per call (see call); the loop is on the
	// heap already, and nothing keeps these past a call.
	args      [3]any
	seed      int64
	maxTokens int64 // MAX_TOKENS, when the config sets no max tokens

	turn  int // the model call the current events belong to (1-based; 0 before the first)
	trace []schemas.TraceEvent
	res   Result
}

// ending says how and why the episode stops.
type ending struct {
	reason  string
	outcome *Outcome // set when the environment said Done
	part    string   // what failed, for FinishError: "model", "hook NAME", "environment", "task"
	err     error
}

func (l *loop) run() {
	e := l.setup()
	for e == nil {
		e = l.step()
	}
	l.finish(e)
}

func (l *loop) fail(part string, err error) *ending {
	return &ending{reason: FinishError, part: part, err: err}
}

func (l *loop) setup() *ending {
	meta, err := sharedHookMeta(l.dom, l.task.Meta)
	if err != nil {
		return l.fail("task", fmt.Errorf("task %s: meta: %w", l.task.ID, err))
	}
	l.st = harness.NewState(map[string]any{"id": l.task.ID, "question": l.task.Question, "meta": meta})
	l.maxTurns = l.h.Int("MAX_TURNS")
	l.formatBudget = l.h.Int("FORMAT_RETRIES")
	l.illegalBudget = l.h.Int("ILLEGAL_RETRIES")
	l.sampling = l.cfg.Sampling
	if l.sampling.MaxTokens == nil {
		l.maxTokens = int64(l.h.Int("MAX_TOKENS"))
		l.sampling.MaxTokens = &l.maxTokens
	}
	if sys := l.h.String("SYSTEM_PROMPT"); sys != "" {
		l.sysMsg = schemas.Message{Role: "system", Content: sys}
		l.defaultSystem = &l.sysMsg
	}
	l.system = l.defaultSystem
	// As many events and messages as the last episode had: the episodes
	// of a run are alike, and growing the slices cost more than filling
	// them.
	l.trace = make([]schemas.TraceEvent, 0, sizeHints.events.Load())
	l.all = make([]schemas.Message, 1, 1+sizeHints.messages.Load())
	if l.defaultSystem != nil {
		l.all[0] = *l.defaultSystem
	}
	l.transcript = l.all[1:]

	env, err := l.dom.NewEnv(l.ctx, l.task, l.h)
	if err != nil {
		return l.fail("environment", err)
	}
	l.env = env
	l.tools = env.Tools()
	obs, err := env.Reset(l.ctx)
	if err != nil {
		return l.fail("environment", fmt.Errorf("reset: %w", err))
	}
	l.event(KindEnv, "reset", bytesString(harness.AppendSummary(append(make([]byte, 0, 64), "observation: "...), obs, clipShort)))
	text, e := l.callString("format_observation", obs)
	if e != nil {
		return e
	}
	l.push(schemas.Message{Role: "user", Content: text})
	return nil
}

// step makes one model call and acts on the reply.
func (l *loop) step() *ending {
	if l.ctx.Err() != nil {
		return l.fail("canceled", context.Cause(l.ctx))
	}
	if l.res.Turns >= l.maxTurns {
		return &ending{reason: FinishMaxTurns}
	}
	l.turn = l.res.Turns + 1
	v, e := l.call("should_stop", l.state())
	if e != nil {
		return e
	}
	if stop, _ := v.(bool); stop {
		return &ending{reason: FinishStopped}
	}
	v, def, err := l.h.BuildMessages(l.ctx, l.state())
	if err != nil {
		return l.fail("hook build_messages", err)
	}
	var msgs []schemas.Message
	if def || l.isDefaultContext(v) {
		msgs = l.defaultContext()
	} else {
		var err error
		if msgs, err = messagesFrom(v); err != nil {
			return l.fail("hook build_messages", err)
		}
		if i := l.differsFromDefault(msgs); i >= 0 {
			data, err := json.Marshal(msgs)
			if err != nil {
				return l.fail("hook build_messages", fmt.Errorf("messages as JSON: %w", err))
			}
			l.event(KindContext, string(data), fmt.Sprintf("%d messages; the default context differs from message %d on", len(msgs), i))
		}
	}
	if !l.called {
		l.called = true
		l.system = nil
		if msgs[0].Role == "system" {
			l.system = &msgs[0]
		}
	}

	l.seed = l.cfg.Seed + int64(l.res.Turns)
	resp, err := l.m.Chat(l.ctx, models.Request{Messages: msgs, Tools: l.tools, Sampling: l.sampling, Seed: &l.seed})
	if err != nil {
		return l.fail("model", err)
	}
	l.res.Turns++
	l.res.PromptTokens += resp.PromptTokens
	l.res.CompletionTokens += resp.CompletionTokens
	l.res.ModelID = resp.Model
	l.event(KindModel, modelAction(resp), replySummary(resp))
	l.push(resp.Message())

	if len(resp.ToolCalls) > 0 {
		return l.nativeCalls(resp.ToolCalls)
	}
	v, e = l.call("parse_action", resp.Content, l.state())
	if e != nil {
		return e
	}
	a, err := harness.ActionFrom(v)
	if err != nil {
		return l.fail("hook parse_action", err)
	}
	l.st.SetLastAction(a.Raw)
	if a.Kind == "invalid" {
		kind := "format"
		if resp.FinishReason == "length" {
			kind = "length"
		}
		return l.invalid(kind, a.Error, "")
	}
	return l.act(a, false)
}

// nativeCalls runs each native tool call of a reply in order. Every call is
// answered by exactly one tool message (chat templates reject a context
// with an unanswered call); observations follow all of them.
func (l *loop) nativeCalls(calls []schemas.ToolCall) *ending {
	for _, tc := range calls {
		a, err := nativeAction(tc)
		if err != nil {
			l.st.SetLastAction(map[string]any{"kind": "invalid", "error": err.Error()})
			if e := l.invalid("format", err.Error(), tc.ID); e != nil {
				return e
			}
			continue
		}
		l.st.SetLastAction(a.Raw)
		if e := l.act(a, true); e != nil {
			l.flushDeferred()
			return e
		}
	}
	l.flushDeferred()
	return nil
}

func (l *loop) flushDeferred() {
	l.push(l.deferred...)
	l.deferred = l.deferred[:0]
}

// nativeAction is a native tool call as an action of kind tool.
func nativeAction(tc schemas.ToolCall) (harness.Action, error) {
	a := harness.Action{Kind: "tool", Tool: tc.Name, ID: tc.ID}
	var args map[string]any
	if strings.TrimSpace(tc.Arguments) != "" {
		if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil {
			return a, fmt.Errorf("the arguments of tool call %s are not a JSON object: %v", tc.Name, err)
		}
	}
	if args == nil {
		args = map[string]any{}
	}
	a.Args = args
	if len(args) == 1 {
		for _, v := range args {
			a.Input, _ = v.(string)
		}
	}
	a.Raw = map[string]any{"kind": "tool", "tool": tc.Name, "id": tc.ID, "args": args}
	if a.Input != "" {
		a.Raw["input"] = a.Input
	}
	return a, nil
}

// invalid spends a format retry on a reply the loop cannot act on, and
// feeds on_error back (as the answer to tool call callID when set).
func (l *loop) invalid(kind, detail, callID string) *ending {
	l.fmtRetries++
	if l.fmtRetries > l.formatBudget {
		return &ending{reason: FinishFormat}
	}
	text, e := l.callString("on_error", kind, detail, l.state())
	if e != nil {
		return e
	}
	if callID != "" {
		l.push(schemas.Message{Role: "tool", Content: text, ToolCallID: callID})
	} else {
		l.push(schemas.Message{Role: "user", Content: text})
	}
	return nil
}

// act hands an answer, move or tool action to the environment and feeds
// back what it said.
func (l *loop) act(a harness.Action, native bool) *ending {
	st, err := l.env.Step(l.ctx, a)
	kind, what := KindEnv, envAction(a)
	if a.Kind == "tool" {
		kind, what = KindTool, toolAction(a)
	}
	if err != nil {
		l.event(kind, what, "error: "+clip(err.Error(), clipShort))
		return l.fail("environment", fmt.Errorf("step %s: %w", what, err))
	}
	l.event(kind, what, stepSummary(st))
	if st.Done {
		out := st.Outcome
		return &ending{reason: FinishAnswer, outcome: &out}
	}

	// reply is the tool message that answers a native call; at most one.
	var reply *string
	switch {
	case st.Illegal != "":
		l.illRetries++
		if l.illRetries > l.illegalBudget {
			return &ending{reason: FinishIllegal}
		}
		text, e := l.callString("on_error", "illegal", st.Illegal, l.state())
		if e != nil {
			return e
		}
		reply = &text
	case st.ToolError != "":
		text, e := l.callString("on_error", "tool", st.ToolError, l.state())
		if e != nil {
			return e
		}
		reply = &text
	case st.ToolResult != nil:
		text, e := l.callString("format_tool_result", st.ToolResult, l.state())
		if e != nil {
			return e
		}
		reply = &text
	}
	if reply != nil {
		l.feedback(native, a, *reply)
	}
	if st.Observation != nil {
		text, e := l.callString("format_observation", st.Observation)
		if e != nil {
			return e
		}
		switch {
		case !native:
			l.push(schemas.Message{Role: "user", Content: text})
		case reply == nil:
			l.feedback(true, a, text)
		default:
			l.deferred = append(l.deferred, schemas.Message{Role: "user", Content: text})
		}
		return nil
	}
	if native && reply == nil {
		// The environment accepted the call and had nothing to say; the
		// call still needs its answer.
		l.feedback(true, a, "")
	}
	return nil
}

func (l *loop) feedback(native bool, a harness.Action, text string) {
	if native {
		l.push(schemas.Message{Role: "tool", Content: text, Name: a.Tool, ToolCallID: a.ID})
		return
	}
	l.push(schemas.Message{Role: "user", Content: text})
}

// state is the state dict hooks receive (see harness.Base's StateDoc),
// brought up to date. The harness converts only what changed since the
// previous call, and gives harness hooks copies.
func (l *loop) state() *harness.State {
	l.st.SetTurn(l.res.Turns)
	l.st.SetMessages(l.transcript)
	l.st.SetRetries(l.fmtRetries, l.illRetries)
	return l.st
}

// plainNumbers replaces the json.Numbers of decoded JSON by int64 or
// float64, as the harness runtime would on every call; a number that is
// neither stays as it is, for the runtime to reject.
func plainNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return f
		}
	case []any:
		for i, e := range x {
			x[i] = plainNumbers(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = plainNumbers(e)
		}
	}
	return v
}

// messagesFrom is harness.MessagesFrom for build_messages' result, which
// Call has already validated: a well-formed list is converted without
// validating it again (that built a path string for every field of every
// message); anything else goes to MessagesFrom, which says what is wrong.
func messagesFrom(v any) ([]schemas.Message, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > harness.MessagesShape.Max {
		return harness.MessagesFrom(v)
	}
	out := make([]schemas.Message, len(list))
	for i, e := range list {
		if !plainToMessage(e, &out[i]) {
			return harness.MessagesFrom(v)
		}
	}
	return out, nil
}

// plainToMessage converts a message dict that conforms to
// harness.MessageShape, and reports false for anything else.
func plainToMessage(v any, m *schemas.Message) bool {
	d, ok := v.(map[string]any)
	if !ok {
		return false
	}
	n := 2
	if m.Role, ok = d["role"].(string); !ok {
		return false
	}
	switch m.Role {
	case "system", "user", "assistant", "tool":
	default:
		return false
	}
	if m.Content, ok = d["content"].(string); !ok {
		return false
	}
	if x, present := d["name"]; present {
		if m.Name, ok = x.(string); !ok {
			return false
		}
		n++
	}
	if x, present := d["tool_call_id"]; present {
		if m.ToolCallID, ok = x.(string); !ok {
			return false
		}
		n++
	}
	if x, present := d["tool_calls"]; present {
		calls, ok := x.([]any)
		if !ok {
			return false
		}
		m.ToolCalls = make([]schemas.ToolCall, len(calls))
		for j, c := range calls {
			if !plainToToolCall(c, &m.ToolCalls[j]) {
				return false
			}
		}
		n++
	}
	return len(d) == n // no key the shape does not name
}

func plainToToolCall(v any, tc *schemas.ToolCall) bool {
	d, ok := v.(map[string]any)
	if !ok {
		return false
	}
	n := 2
	if tc.Name, ok = d["name"].(string); !ok {
		return false
	}
	if tc.Arguments, ok = d["arguments"].(string); !ok {
		return false
	}
	if x, present := d["id"]; present {
		if tc.ID, ok = x.(string); !ok {
			return false
		}
		n++
	}
	return len(d) == n
}

func (l *loop) call(hook string, args ...any) (any, *ending) {
	// The hook's arguments go through l.args: a variadic slice handed to
	// the harness escapes, and allocating one per hook call was a tenth
	// of an episode's allocations.
	var buf []any
	if len(args) <= len(l.args) {
		buf = l.args[:len(args)]
		defer clear(buf)
	} else {
		buf = make([]any, len(args))
	}
	copy(buf, args)
	v, err := l.h.Call(l.ctx, hook, buf...)
	if err != nil {
		return nil, l.fail("hook "+hook, err)
	}
	return v, nil
}

func (l *loop) callString(hook string, args ...any) (string, *ending) {
	v, e := l.call(hook, args...)
	if e != nil {
		return "", e
	}
	s, ok := v.(string)
	if !ok {
		return "", l.fail("hook "+hook, fmt.Errorf("returned %T, want a string", v))
	}
	return s, nil
}

func (l *loop) push(msgs ...schemas.Message) {
	l.all = append(l.all, msgs...)
	l.transcript = l.all[1:]
}

// defaultContext is the SYSTEM_PROMPT message, then the transcript. The
// model client only reads it, and the loop only appends after it.
func (l *loop) defaultContext() []schemas.Message {
	if l.defaultSystem != nil {
		return l.all[:len(l.all):len(l.all)]
	}
	return l.transcript[:len(l.transcript):len(l.transcript)]
}

// isDefaultContext reports whether v, what build_messages returned, is
// the default context, without converting it: the default build_messages
// returns it, and most harnesses leave the hook out.
func (l *loop) isDefaultContext(v any) bool {
	list, ok := v.([]any)
	want := l.defaultContext()
	if !ok || len(list) != len(want) {
		return false
	}
	for i, e := range list {
		var m schemas.Message
		if !plainToMessage(e, &m) || !sameMessage(m, want[i]) {
			return false
		}
	}
	return true
}

// differsFromDefault returns the index of the first message where msgs
// differs from the default context, or -1 when they are the same.
func (l *loop) differsFromDefault(msgs []schemas.Message) int {
	want := l.defaultContext()
	n := min(len(msgs), len(want))
	for i := range n {
		if !sameMessage(msgs[i], want[i]) {
			return i
		}
	}
	if len(msgs) != len(want) {
		return n
	}
	return -1
}

func sameMessage(a, b schemas.Message) bool {
	if a.Role != b.Role || a.Content != b.Content || a.Name != b.Name || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i] != b.ToolCalls[i] {
			return false
		}
	}
	return true
}

// finish fills the Result from how the episode ended.
func (l *loop) finish(e *ending) {
	l.res.FinishReason = e.reason
	if e.reason == FinishError {
		part, msg, detail := l.errorText(e)
		l.res.Error = msg
		l.event(KindError, part, clip(detail, clipLong))
	}
	switch {
	case e.outcome != nil:
		l.res.Outcome = *e.outcome
	case l.env != nil:
		l.res.Outcome = l.env.Final(l.ctx)
		o := l.res.Outcome
		l.event(KindEnv, "final", fmt.Sprintf("reward=%g correct=%t answer=%s", o.Reward, o.Correct, strconv.Quote(clip(o.Answer, clipShort))))
	}
	// No call follows: all[0] may take the system message of the first.
	if l.system != nil {
		l.all[0] = *l.system
		l.res.Messages = l.all
	} else {
		l.res.Messages = l.transcript
		if l.res.Messages == nil {
			l.res.Messages = []schemas.Message{} // [], not null, when setup failed early
		}
	}
	l.res.Trace = l.trace
	sizeHints.events.Store(int32(min(len(l.trace), maxHint)))
	sizeHints.messages.Store(int32(min(len(l.transcript), maxHint)))
}

// sizeHints are the sizes of the last finished episode (see setup).
var sizeHints = struct{ events, messages atomic.Int32 }{}

// maxHint bounds sizeHints, so that one long episode does not make every
// later one allocate for its like.
const maxHint = 64

// errorText is the Result's Error (one line, naming the failing part) and
// the error event's detail (with the Starlark backtrace, if any).
func (l *loop) errorText(e *ending) (part, msg, detail string) {
	if l.ctx.Err() != nil {
		msg = "canceled: " + context.Cause(l.ctx).Error()
		if e.part != "canceled" && e.err != nil {
			return "canceled", msg, msg + " (during " + e.part + ": " + e.err.Error() + ")"
		}
		return "canceled", msg, msg
	}
	if he := (*harness.HookError)(nil); errors.As(e.err, &he) {
		if he.Pos.Line > 0 || he.Pos.File != "" {
			msg = fmt.Sprintf("hook %s: %s: %s", he.Hook, he.Pos, he.Msg)
		} else {
			msg = fmt.Sprintf("hook %s: %s", he.Hook, he.Msg)
		}
		detail = msg
		if he.Backtrace != "" {
			detail += "\n" + he.Backtrace
		}
		return e.part, msg, detail
	}
	msg = e.part + ": " + e.err.Error()
	return e.part, msg, msg
}

func (l *loop) record(rec harness.CallRecord) {
	ev := rec.TraceEvent(l.turn)
	ev.Action = clip(ev.Action, clipLong)
	ev.Feedback = clip(ev.Feedback, clipLong)
	l.trace = append(l.trace, ev)
}

func (l *loop) event(kind, action, feedback string) {
	l.trace = append(l.trace, schemas.TraceEvent{Turn: int32(l.turn), Kind: kind, Action: action, Feedback: feedback})
}

func modelAction(r *models.Response) string {
	var b strings.Builder
	b.Grow(128)
	b.WriteString("chat: finish=")
	b.WriteString(r.FinishReason)
	if r.UsageMissing {
		b.WriteString(" usage=missing")
	} else {
		b.WriteString(" prompt=")
		b.WriteString(strconv.FormatInt(r.PromptTokens, 10))
		b.WriteString(" completion=")
		b.WriteString(strconv.FormatInt(r.CompletionTokens, 10))
	}
	if len(r.ToolCalls) > 0 {
		b.WriteString(" tool_calls=")
		b.WriteString(strconv.Itoa(len(r.ToolCalls)))
	}
	b.WriteString(" attempts=")
	b.WriteString(strconv.Itoa(r.Attempts))
	b.WriteString(" latency=")
	b.WriteString(r.Latency.Round(time.Microsecond).String())
	b.WriteString(" endpoint=")
	b.WriteString(r.Endpoint)
	return b.String()
}

func replySummary(r *models.Response) string {
	s := clip(r.Content, clipShort)
	for _, tc := range r.ToolCalls {
		s += " [call " + tc.Name + "(" + clip(tc.Arguments, clipShort/2) + ") id=" + tc.ID + "]"
	}
	return s
}

func envAction(a harness.Action) string {
	switch a.Kind {
	case "answer":
		return quoted("answer ", a.Answer)
	case "move":
		return quoted("move ", a.Move)
	}
	return a.Kind
}

func toolAction(a harness.Action) string {
	b := make([]byte, 0, len(a.Tool)+len(a.Input)+len(a.ID)+16)
	b = append(b, a.Tool...)
	b = append(b, '(')
	if a.Input != "" || len(a.Args) == 0 {
		b = appendQuotedClip(b, a.Input, clipShort)
	} else {
		b = harness.AppendSummary(b, a.Args, clipShort)
	}
	b = append(b, ')')
	if a.ID != "" {
		b = append(b, " id="...)
		b = append(b, a.ID...)
	}
	return bytesString(b)
}

// quoted is prefix then s, clipped to clipShort and quoted.
func quoted(prefix, s string) string {
	b := make([]byte, 0, len(prefix)+min(len(s), clipShort)+8)
	b = append(b, prefix...)
	return bytesString(appendQuotedClip(b, s, clipShort))
}

// appendQuotedClip appends strconv.Quote(clip(s, n)).
func appendQuotedClip(b []byte, s string, n int) []byte {
	if len(s) <= n {
		return strconv.AppendQuote(b, s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	b = strconv.AppendQuote(b, s[:cut])
	return append(b[:len(b)-1], "…\""...)
}

func stepSummary(st Step) string {
	if !st.Done && st.Illegal == "" && st.ToolError == "" && st.ToolResult == nil && st.Observation == nil {
		return "accepted"
	}
	b := make([]byte, 0, 128)
	if st.Done {
		o := st.Outcome
		b = append(b, "done: reward="...)
		b = strconv.AppendFloat(b, o.Reward, 'g', -1, 64)
		b = append(b, " correct="...)
		b = strconv.AppendBool(b, o.Correct)
		b = append(b, " answer="...)
		b = appendQuotedClip(b, o.Answer, clipShort)
	}
	if st.Illegal != "" {
		b = sep(b)
		b = append(b, "illegal: "...)
		b = append(b, clip(st.Illegal, clipShort)...)
	}
	if st.ToolError != "" {
		b = sep(b)
		b = append(b, "tool error: "...)
		b = append(b, clip(st.ToolError, clipShort)...)
	}
	if st.ToolResult != nil {
		b = sep(b)
		b = append(b, "result: "...)
		b = harness.AppendSummary(b, st.ToolResult, clipShort)
	}
	if st.Observation != nil {
		b = sep(b)
		b = append(b, "observation: "...)
		b = harness.AppendSummary(b, st.Observation, clipShort)
	}
	return bytesString(b)
}

// sep separates the parts of a step's summary.
func sep(b []byte) []byte {
	if len(b) > 0 {
		return append(b, "; "...)
	}
	return b
}

// metaCache holds tasks' metas as hooks see them (decoded, reference
// answers dropped, filtered by the domain), by domain and JSON text: every
// sample of a task has the same, and decoding and filtering it again for
// each episode cost more than the episode's default hooks. Entries are
// shared by concurrent episodes and never modified: harness hooks get
// converted copies and Go defaults do not modify their arguments.
var metaCache struct {
	sync.Mutex
	m map[metaKey]map[string]any
}

type metaKey struct{ domain, meta string }

// maxCachedMetas bounds metaCache; it is emptied when full, which costs one
// decode per task afterwards.
const maxCachedMetas = 4096

// sharedHookMeta is hookMeta of the decoded meta with plain numbers, from
// metaCache when it can.
func sharedHookMeta(dom Domain, meta string) (map[string]any, error) {
	k := metaKey{dom.Name(), meta}
	metaCache.Lock()
	m, ok := metaCache.m[k]
	metaCache.Unlock()
	if ok {
		return m, nil
	}
	m, err := decodeMeta(meta)
	if err != nil {
		return nil, err
	}
	m = hookMeta(dom, plainNumbers(m).(map[string]any))
	metaCache.Lock()
	if metaCache.m == nil || len(metaCache.m) >= maxCachedMetas {
		metaCache.m = make(map[metaKey]map[string]any)
	}
	metaCache.m[k] = m
	metaCache.Unlock()
	return m, nil
}

// decodeMeta is a task's meta column as a dict. Numbers stay json.Number,
// which the harness runtime turns into Starlark ints or floats as written.
func decodeMeta(meta string) (map[string]any, error) {
	out := map[string]any{}
	if m := strings.TrimSpace(meta); m == "" || m == "{}" {
		return out, nil
	}
	dec := json.NewDecoder(strings.NewReader(meta))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case nil:
		return out, nil
	}
	return nil, fmt.Errorf("want a JSON object, got %s", clip(meta, 40))
}

// bytesString is b as a string without copying it. Only for a buffer the
// caller made for this string and drops: the trace's texts are built in
// their own buffers, and copying each into a string doubled their
// allocations.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Job is one episode of a batch.
type Job struct {
	Index  int // position in the batch; results are emitted in this order
	Task   schemas.Task
	Sample int
	Seed   int64
}

// windowPerWorker sizes RunBatch's reorder window: at most this many
// episodes per worker may be started and not yet emitted. A slow episode
// at the head of the window then stalls new work instead of letting
// finished results pile up.
const windowPerWorker = 4

// RunBatch runs jobs with at most concurrency episodes in flight, calling
// play for each and emit with each result in job order (Index order), from
// one goroutine. At most a small multiple of concurrency results wait for
// emission, so memory stays flat however many jobs there are. It stops at
// the first error of emit or when ctx ends, returning that error.
func RunBatch(ctx context.Context, concurrency int, jobs iter.Seq[Job], play func(context.Context, Job) Result, emit func(Job, Result) error) error {
	if concurrency < 1 {
		concurrency = 1
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type slot struct {
		job  Job
		res  Result
		done chan struct{}
	}
	// order holds the started or about-to-start jobs in Index order; its
	// capacity plus the one slot the emitter holds is the window.
	order := make(chan *slot, windowPerWorker*concurrency-1)
	work := make(chan *slot)

	var workers sync.WaitGroup
	for range concurrency {
		workers.Go(func() {
			for s := range work {
				s.res = play(ctx, s.job)
				close(s.done)
			}
		})
	}

	var feedErr error
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		defer close(work)
		defer close(order)
		last, first := 0, true
		for j := range jobs {
			if !first && j.Index <= last {
				feedErr = fmt.Errorf("run batch: job index %d after %d: jobs must come in increasing Index order", j.Index, last)
				return
			}
			last, first = j.Index, false
			s := &slot{job: j, done: make(chan struct{})}
			select {
			case order <- s:
			case <-ctx.Done():
				return
			}
			select {
			case work <- s:
			case <-ctx.Done():
				return
			}
		}
	}()

	var emitErr error
	for s := range order {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if err := emit(s.job, s.res); err != nil {
			emitErr = fmt.Errorf("emit job %d: %w", s.job.Index, err)
			break
		}
		s.res = Result{}
	}
	cancel()
	<-fed
	workers.Wait()
	switch {
	case emitErr != nil:
		return emitErr
	case parent.Err() != nil:
		return parent.Err()
	}
	return feedErr
}

// Row is r as a rollouts-table row; base carries the columns the loop does
// not know (run, position, model and harness ids, task id, sample, seed).
// ModelID is r's when base leaves it empty.
func (r Result) Row(base schemas.Rollout) schemas.Rollout {
	row := base
	if row.ModelID == "" {
		row.ModelID = r.ModelID
	}
	row.Reward = r.Reward
	row.Correct = r.Correct
	row.Answer = r.Answer
	row.FinishReason = r.FinishReason
	row.Error = r.Error
	row.Turns = int32(r.Turns)
	row.PromptTokens = r.PromptTokens
	row.CompletionTokens = r.CompletionTokens
	row.LatencyMS = r.Latency.Milliseconds()
	row.Messages = r.Messages
	row.Trace = r.Trace
	return row
}

// hookMeta is the part of a task's meta hooks may see: without reference
// answers, and as the domain filters it. meta is shared and stays as is.
func hookMeta(dom Domain, meta map[string]any) map[string]any {
	drop := false
	for _, k := range ReferenceKeys {
		if _, ok := meta[k]; ok {
			drop = true
			break
		}
	}
	if drop {
		out := make(map[string]any, len(meta))
		for k, v := range meta {
			if !slices.Contains(ReferenceKeys, k) {
				out[k] = v
			}
		}
		meta = out
	}
	if f, ok := dom.(MetaFilter); ok {
		meta = f.HookMeta(meta)
	}
	return meta
}
