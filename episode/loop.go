package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
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

	env        Env
	tools      []models.Tool // the harness's TOOLS, as sent
	toolChoice string

	maxTurns, formatBudget, illegalBudget, maxToolChars int
	sampling                                            models.Sampling

	// st is the state hooks see; st.Messages is the transcript: every
	// observation, reply, tool result and feedback message, in order.
	st harness.State
	// systemPrompt is SYSTEM_PROMPT, the head of the default context.
	systemPrompt string
	// system is what Result.Messages starts with: the system message of
	// the first call once there was one.
	system *schemas.Message
	called bool
	// deferred holds the user messages (observations) that follow a reply
	// with native tool calls: they must come after every tool message of
	// that reply, which chat templates require to follow it directly.
	deferred []schemas.Message

	// ids is the token sequence of the previous call's prompt and reply
	// while the server returns ids and each prompt extends the last;
	// noIDs once an episode cannot have exact tokens.
	ids   []int32
	noIDs bool

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
	meta, err := taskMeta(l.dom, l.task.Meta)
	if err != nil {
		return l.fail("task", fmt.Errorf("task %s: meta: %w", l.task.ID, err))
	}
	l.st.Task = map[string]any{"id": l.task.ID, "question": l.task.Question, "meta": meta}
	l.maxTurns = l.h.Int("MAX_TURNS")
	l.formatBudget = l.h.Int("FORMAT_RETRIES")
	l.illegalBudget = l.h.Int("ILLEGAL_RETRIES")
	l.maxToolChars = l.h.Int("MAX_TOOL_RESULT_CHARS")
	l.sampling = l.cfg.Sampling
	l.sampling.Stop = mergeStops(l.cfg.Sampling.Stop, l.h.Stop())
	for _, t := range l.h.Tools() {
		l.tools = append(l.tools, models.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	l.toolChoice = l.h.ToolChoice()
	if len(l.tools) > 0 {
		tools, err := models.ToolsJSON(l.tools)
		if err != nil {
			return l.fail("hook TOOLS", err)
		}
		l.res.Tools = tools
	}
	if l.sampling.MaxTokens == nil {
		maxTokens := int64(l.h.Int("MAX_TOKENS"))
		l.sampling.MaxTokens = &maxTokens
	}
	l.systemPrompt = l.h.String("SYSTEM_PROMPT")
	if l.systemPrompt != "" {
		l.system = &schemas.Message{Role: "system", Content: l.systemPrompt}
	}

	env, err := l.dom.NewEnv(l.ctx, l.task, l.h)
	if err != nil {
		return l.fail("environment", err)
	}
	l.env = env
	obs, err := env.Reset(l.ctx)
	if err != nil {
		return l.fail("environment", fmt.Errorf("reset: %w", err))
	}
	l.event(KindEnv, "reset", "observation: "+harness.Summarize(obs, clipShort))
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
	// should_stop and build_messages see the same state: nothing happens
	// between them. Each hook gets its own copy of it (see harness.Call).
	state := l.state()
	v, e := l.call("should_stop", state)
	if e != nil {
		return e
	}
	if stop, _ := v.(bool); stop {
		return &ending{reason: FinishStopped}
	}
	v, e = l.call("build_messages", state)
	if e != nil {
		return e
	}
	msgs, err := harness.MessagesFrom(v)
	if err != nil {
		return l.fail("hook build_messages", err)
	}
	if i := l.differsFromDefault(msgs); i >= 0 {
		data, err := json.Marshal(msgs)
		if err != nil {
			return l.fail("hook build_messages", fmt.Errorf("messages as JSON: %w", err))
		}
		l.event(KindContext, string(data), fmt.Sprintf("%d messages; the default context differs from message %d on", len(msgs), i))
	}
	if !l.called {
		l.called = true
		l.system = nil
		if msgs[0].Role == "system" {
			l.system = &msgs[0]
		}
	}

	seed := l.cfg.Seed + int64(l.res.Turns)
	resp, err := l.m.Chat(l.ctx, models.Request{Messages: msgs, Tools: l.tools, ToolChoice: l.toolChoice, Sampling: l.sampling, Seed: &seed})
	if err != nil {
		return l.fail("model", err)
	}
	l.res.Turns++
	l.res.PromptTokens += resp.PromptTokens
	l.res.CompletionTokens += resp.CompletionTokens
	l.res.ModelID = resp.Model
	l.event(KindModel, modelAction(resp), replySummary(resp))
	msg := resp.Message()
	// A server that stopped at a stop sequence leaves it out (vLLM's
	// default); the model did write it, and parse_action needs the
	// closing tag.
	l.tokenIDs(resp, &msg)
	if s := resp.StopReason; s != "" && len(resp.ToolCalls) == 0 && slices.Contains(l.sampling.Stop, s) && !strings.HasSuffix(msg.Content, s) {
		msg.Content += s
		l.dropIDs("a stop sequence the server left out was put back, so the text is no longer that of the tokens", &msg)
	}
	l.push(msg)

	if len(resp.ToolCalls) > 0 {
		return l.nativeCalls(resp.ToolCalls)
	}
	v, e = l.call("parse_action", msg.Content, l.state())
	if e != nil {
		return e
	}
	a, err := harness.ActionFrom(v)
	if err != nil {
		return l.fail("hook parse_action", err)
	}
	if a.End >= 0 {
		if err := l.cut(a.End); err != nil {
			return l.fail("hook parse_action", err)
		}
	}
	l.st.LastAction = a.Raw
	if a.Kind == "invalid" {
		kind := "format"
		if resp.FinishReason == "length" {
			kind = "length"
		}
		return l.invalid(kind, a.Error, "")
	}
	return l.act(a, false)
}

// cut ends the latest assistant message at byte end of its text, where
// parse_action says the action ends: what the model wrote after it (an
// invented observation, a second answer) is neither stored nor trained
// on. The dropped text stays in the trace, whole.
func (l *loop) cut(end int) error {
	m := &l.st.Messages[len(l.st.Messages)-1]
	n := len(m.Content)
	switch {
	case end > n:
		return fmt.Errorf("action end %d is past the end of the reply (%d bytes)", end, n)
	case end < n && !utf8.RuneStart(m.Content[end]):
		return fmt.Errorf("action end %d is inside a UTF-8 character of the reply", end)
	case end == n:
		return nil
	}
	tail := m.Content[end:]
	m.Content = m.Content[:end]
	l.event(KindCut, fmt.Sprintf("kept %d of %d bytes", end, n), tail)
	l.dropIDs("the reply was cut at its action, so its tokens are not the stored text's")
	return nil
}

// tokenIDs keeps the server's token ids with the reply: the completion's,
// and the part of the prompt after the previous call's prompt and
// completion. An episode whose prompts do not extend each other (a
// context built otherwise, a chat template that rewrites history) or
// whose server stops returning ids keeps none.
func (l *loop) tokenIDs(resp *models.Response, msg *schemas.Message) {
	if l.noIDs {
		return
	}
	if resp.TokenIDs == nil || resp.PromptTokenIDs == nil {
		if l.ids != nil {
			l.dropIDs("the server returned no token ids for this call", msg)
		}
		l.noIDs = true
		return
	}
	p := resp.PromptTokenIDs
	if len(p) < len(l.ids) || !slices.Equal(p[:len(l.ids)], l.ids) {
		l.dropIDs(fmt.Sprintf("the prompt of call %d does not start with the previous call's prompt and reply", l.turn), msg)
		return
	}
	msg.PromptTokenIDs = slices.Clone(p[len(l.ids):])
	msg.TokenIDs = slices.Clone(resp.TokenIDs)
	l.ids = append(slices.Clip(p), resp.TokenIDs...)
}

// dropIDs removes the token ids of the episode (and of msg, not pushed
// yet), saying why in the trace: the trainer then renders its text.
func (l *loop) dropIDs(why string, msgs ...*schemas.Message) {
	if l.noIDs && l.ids == nil {
		return
	}
	l.noIDs, l.ids = true, nil
	for i := range l.st.Messages {
		l.st.Messages[i].TokenIDs, l.st.Messages[i].PromptTokenIDs = nil, nil
	}
	for _, m := range msgs {
		m.TokenIDs, m.PromptTokenIDs = nil, nil
	}
	l.event(KindCut, "token ids dropped", why)
}

// mergeStops is the experiment's stop sequences followed by the harness's
// that are not among them.
func mergeStops(spec, harness []string) []string {
	out := slices.Clone(spec)
	for _, s := range harness {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// nativeCalls runs each native tool call of a reply in order. Every call is
// answered by exactly one tool message (chat templates reject a context
// with an unanswered call); observations follow all of them. A call the
// loop cannot run (an unknown tool, arguments that are not a JSON object
// or do not match the tool's parameters) is answered with
// on_error("tool", ...) and the episode goes on.
func (l *loop) nativeCalls(calls []schemas.ToolCall) *ending {
	for _, tc := range calls {
		a, problem := l.nativeAction(tc)
		if problem != "" {
			l.st.LastAction = map[string]any{"kind": "tool", "tool": tc.Name, "id": tc.ID, "error": problem}
			l.event(KindTool, toolAction(harness.Action{Tool: tc.Name, Input: tc.Arguments, ID: tc.ID}), "tool error: "+clip(problem, clipShort))
			text, e := l.callString("on_error", "tool", problem, l.state())
			if e != nil {
				l.flushDeferred()
				return e
			}
			l.feedback(true, harness.Action{Tool: tc.Name, ID: tc.ID}, text)
			continue
		}
		l.st.LastAction = a.Raw
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

// nativeAction is a native tool call as an action of kind tool, or the
// problem that keeps the loop from running it, in words for the model.
func (l *loop) nativeAction(tc schemas.ToolCall) (harness.Action, string) {
	a := harness.Action{Kind: "tool", Tool: tc.Name, ID: tc.ID, End: -1}
	tool, ok := l.h.Tool(tc.Name)
	if !ok {
		names := make([]string, len(l.tools))
		for i, t := range l.tools {
			names[i] = t.Name
		}
		if len(names) == 0 {
			return a, fmt.Sprintf("there is no tool %q: no tools are offered", tc.Name)
		}
		return a, fmt.Sprintf("there is no tool %q: the tools are %s", tc.Name, strings.Join(names, ", "))
	}
	var args map[string]any
	if strings.TrimSpace(tc.Arguments) != "" {
		if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil {
			return a, fmt.Sprintf("the arguments of %s are not a JSON object: %v", tc.Name, err)
		}
	}
	if args == nil {
		args = map[string]any{}
	}
	if err := tool.CheckArgs(args); err != nil {
		return a, err.Error()
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
	return a, ""
}

// invalid spends a format retry on a reply the loop cannot act on, and
// feeds on_error back (as the answer to tool call callID when set).
func (l *loop) invalid(kind, detail, callID string) *ending {
	l.st.FormatRetries++
	if l.st.FormatRetries > l.formatBudget {
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
		l.st.IllegalRetries++
		if l.st.IllegalRetries > l.illegalBudget {
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

// capToolResult cuts the text answering an action (a formatted tool
// result, a tool error's feedback) to MAX_TOOL_RESULT_CHARS characters,
// saying so at the end, and traces the cut.
func (l *loop) capToolResult(text string) string {
	kept, cut := harness.CutChars(text, l.maxToolChars)
	if !cut {
		return text
	}
	n := utf8.RuneCountInString(text)
	l.event(KindCut, fmt.Sprintf("tool result: kept %d of %d characters", l.maxToolChars, n), "MAX_TOOL_RESULT_CHARS")
	return kept + fmt.Sprintf("\n[tool result cut: %d more characters]", n-l.maxToolChars)
}

func (l *loop) feedback(native bool, a harness.Action, text string) {
	text = l.capToolResult(text)
	if native {
		l.push(schemas.Message{Role: "tool", Content: text, Name: a.Tool, ToolCallID: a.ID})
		return
	}
	l.push(schemas.Message{Role: "user", Content: text})
}

// state is the state dict hooks receive (see harness.Base's StateDoc),
// brought up to date.
func (l *loop) state() map[string]any {
	l.st.Turn = l.res.Turns
	return l.st.Dict()
}

func (l *loop) call(hook string, args ...any) (any, *ending) {
	v, err := l.h.Call(l.ctx, hook, args...)
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
	l.st.Messages = append(l.st.Messages, msgs...)
}

// defaultContext is the SYSTEM_PROMPT message, unless the prompt is
// empty, then the transcript.
func (l *loop) defaultContext() []schemas.Message {
	if l.systemPrompt == "" {
		return l.st.Messages
	}
	return append([]schemas.Message{{Role: "system", Content: l.systemPrompt}}, l.st.Messages...)
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
	if a.Role != b.Role || a.Content != b.Content || a.Name != b.Name || a.ToolCallID != b.ToolCallID || a.Reasoning != b.Reasoning || len(a.ToolCalls) != len(b.ToolCalls) {
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
	l.res.Messages = []schemas.Message{} // [], not null, when setup failed early
	if l.system != nil {
		l.res.Messages = append(l.res.Messages, *l.system)
	}
	l.res.Messages = append(l.res.Messages, l.st.Messages...)
	l.res.Trace = l.trace
}

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
