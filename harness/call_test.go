package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"github.com/whalerun/whale/schemas"
)

var bg = context.Background()

func state(msgs ...schemas.Message) map[string]any {
	return map[string]any{
		"task":        map[string]any{"id": "t1", "question": "2+2?", "meta": map[string]any{}},
		"turn":        len(msgs),
		"messages":    msgs,
		"last_action": nil,
		"retries":     map[string]any{"format": 0, "illegal": 0},
	}
}

func TestStepLimitStopsEndlessLoops(t *testing.T) {
	tests := []struct {
		name string
		body string
		line int
	}{
		{"while True", "    while True:\n        pass\n", 3},
		{"huge nested for", "    n = 0\n    for i in range(1000000):\n        for j in range(1000000):\n            n += 1\n", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "\ndef should_stop(state):\n" + tt.body
			h := mustLoad(t, src, Options{MaxSteps: 100_000})
			start := time.Now()
			_, err := h.Call(bg, "should_stop", state())
			he := hookErr(t, err)
			if !errors.Is(err, ErrStepLimit) {
				t.Fatalf("error %v, want ErrStepLimit", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("stopping took %s", d)
			}
			if he.Steps < 100_000 || he.Steps > 100_010 {
				t.Errorf("steps %d, want about the limit 100000", he.Steps)
			}
			// Starlark's line table maps the bare jump of "while True: pass"
			// to the def line, so the hook's lines are what can be promised.
			if he.Pos.Line < 2 || he.Pos.Line > tt.line {
				t.Errorf("position %v, want inside the hook (lines 2..%d)", he.Pos, tt.line)
			}
			wantContains(t, "error", err.Error(), "hook should_stop (h.star:", "ran more than 100000 steps")
			wantContains(t, "backtrace", he.Backtrace, "in should_stop")
		})
	}
}

func TestDeadlineStopsSlowHooks(t *testing.T) {
	c := testContract()
	t.Run("slow helper that honours ctx", func(t *testing.T) {
		h := mustLoad(t, "def should_stop(state):\n    nap(60000)\n    return True\n", Options{Contract: c, CallTimeout: 50 * time.Millisecond})
		start := time.Now()
		_, err := h.Call(bg, "should_stop", state())
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("error %v, want ErrDeadline", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("stopping took %s", d)
		}
		wantContains(t, "error", err.Error(), "did not finish within 50ms")
	})
	t.Run("many short naps that ignore ctx", func(t *testing.T) {
		h := mustLoad(t, "def should_stop(state):\n    for i in range(100000):\n        stubborn_nap(5)\n", Options{Contract: c, CallTimeout: 40 * time.Millisecond})
		start := time.Now()
		_, err := h.Call(bg, "should_stop", state())
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("error %v, want ErrDeadline", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("stopping took %s", d)
		}
		if he := hookErr(t, err); he.Pos.Line != 3 {
			t.Errorf("position %v, want line 3", he.Pos)
		}
	})
	t.Run("tiny deadline on pure computation", func(t *testing.T) {
		h := mustLoad(t, "def should_stop(state):\n    while True:\n        pass\n", Options{CallTimeout: time.Millisecond})
		_, err := h.Call(bg, "should_stop", state())
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("error %v, want ErrDeadline", err)
		}
	})
	t.Run("caller's deadline", func(t *testing.T) {
		h := mustLoad(t, "def should_stop(state):\n    nap(60000)\n", Options{Contract: c})
		ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		defer cancel()
		_, err := h.Call(ctx, "should_stop", state())
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want ErrDeadline and context.DeadlineExceeded", err)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		h := mustLoad(t, "def should_stop(state):\n    nap(60000)\n", Options{Contract: c})
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err := h.Call(ctx, "should_stop", state())
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrDeadline) {
			t.Fatalf("error %v, want context.Canceled only", err)
		}
	})
}

func TestRuntimeErrorsCarryPositionAndBacktrace(t *testing.T) {
	src := `
def _score(x):
    return 10 // x

def parse_action(text, state):
    if text == "zero":
        return {"kind": "answer", "answer": str(_score(0))}
    if text == "key":
        return state["no such key"]
    if text == "fail":
        fail("bad reply: " + text)
    if text == "frozen":
        STOP.append("x")
    if text == "regex":
        return re.search(r"(a)\1", text)
    return {"kind": "answer", "answer": text}

STOP = ["a"]
`
	h := mustLoad(t, src, Options{})
	tests := []struct {
		text  string
		line  int
		msg   string
		trace []string
	}{
		{"zero", 3, "division by zero", []string{"h.star:7:", "in parse_action", "h.star:3:", "in _score"}},
		{"key", 9, `key "no such key" not in dict`, []string{"h.star:9:", "in parse_action"}},
		{"fail", 11, "bad reply: fail", []string{"h.star:11:", "in fail"}},
		{"frozen", 13, "frozen", []string{"h.star:13:"}},
		{"regex", 15, "backreferences", []string{"h.star:15:", "in re.search"}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := h.Call(bg, "parse_action", tt.text, state())
			he := hookErr(t, err)
			if !errors.Is(err, ErrRuntime) {
				t.Errorf("error %v, want ErrRuntime", err)
			}
			if he.Pos.File != "h.star" || he.Pos.Line != tt.line {
				t.Errorf("position %v, want h.star:%d", he.Pos, tt.line)
			}
			if he.Hook != "parse_action" || he.Harness != h.ID() {
				t.Errorf("hook %q harness %q", he.Hook, he.Harness)
			}
			wantContains(t, "message", err.Error(), tt.msg, fmt.Sprintf("h.star:%d:", tt.line))
			wantContains(t, "backtrace", he.Backtrace, tt.trace...)
			var ee *starlark.EvalError
			if !errors.As(err, &ee) {
				t.Error("error does not unwrap to *starlark.EvalError")
			}
		})
	}
}

func TestResultShapeValidated(t *testing.T) {
	tests := []struct {
		name string
		hook string
		body string
		want []string
	}{
		{"messages not a list", "build_messages", `return "hi"`, []string{"must return non-empty list of message", `want non-empty list of message, got string "hi"`}},
		{"no messages", "build_messages", `return []`, []string{"want at least 1 elements"}},
		{"bad role", "build_messages", `return [{"role": "bot", "content": "x"}]`, []string{`result[0]["role"]: want one of "system"|"user"|"assistant"|"tool", got "bot"`}},
		{"missing content", "build_messages", `return [{"role": "user"}]`, []string{`result[0]: missing key "content"`}},
		{"content not a string", "build_messages", `return [{"role": "user", "content": 1}]`, []string{`result[0]["content"]: want string, got int 1`}},
		{"misspelled key", "build_messages", `return [{"role": "user", "contnet": "x", "content": "y"}]`, []string{`unknown key "contnet"`}},
		{"bad tool call", "build_messages", `return [{"role": "assistant", "content": "", "tool_calls": [{"name": "search"}]}]`, []string{`["tool_calls"][0]: missing key "arguments"`}},
		{"action without kind", "parse_action", `return {"answer": "4"}`, []string{`want key "kind"`}},
		{"action of unknown kind", "parse_action", `return {"kind": "guess"}`, []string{`result["kind"]: want one of "answer"|"invalid"|"move"|"tool", got "guess"`}},
		{"answer missing", "parse_action", `return {"kind": "answer"}`, []string{`missing key "answer"`}},
		{"answer not a string", "parse_action", `return {"kind": "answer", "answer": 4}`, []string{`result["answer"]: want string, got int 4`}},
		{"None observation", "format_observation", `return None`, []string{"must return string", "got None"}},
		{"function result", "format_observation", `return len`, []string{"cannot return a Starlark builtin_function_or_method"}},
		{"stop as string", "should_stop", `return "yes"`, []string{"want bool or None"}},
		{"huge int", "on_error", `return 1 << 70`, []string{"does not fit in 64 bits"}},
		{"self-containing list", "build_messages", "l = []\n    l.append(l)\n    return l", []string{"nested deeper than"}},
	}
	params := map[string]string{
		"build_messages": "state", "parse_action": "text, state", "format_observation": "obs",
		"should_stop": "state", "on_error": "kind, detail, state",
	}
	args := map[string][]any{
		"build_messages": {state()}, "parse_action": {"x", state()}, "format_observation": {map[string]any{"question": "q"}},
		"should_stop": {state()}, "on_error": {"format", "d", state()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fmt.Sprintf("X = 1\n\ndef %s(%s):\n    %s\n", tt.hook, params[tt.hook], tt.body)
			h := mustLoad(t, src, Options{})
			_, err := h.Call(bg, tt.hook, args[tt.hook]...)
			he := hookErr(t, err)
			if !errors.Is(err, ErrBadResult) {
				t.Errorf("error %v, want ErrBadResult", err)
			}
			if he.Pos.Line != 3 {
				t.Errorf("position %v, want the def on line 3", he.Pos)
			}
			wantContains(t, "error", err.Error(), append([]string{"hook " + tt.hook + " (h.star:3:"}, tt.want...)...)
		})
	}
	// None is fine for should_stop; a tuple is a list.
	h := mustLoad(t, "def should_stop(state):\n    pass\ndef build_messages(state):\n    return ({'role': 'user', 'content': 'x'},)\n", Options{})
	if v, err := h.Call(bg, "should_stop", state()); err != nil || v != nil {
		t.Errorf("should_stop = %v, %v; want None", v, err)
	}
	if v, err := h.Call(bg, "build_messages", state()); err != nil {
		t.Errorf("build_messages returning a tuple: %v, %v", v, err)
	}
}

func TestDefaultsUsedForMissingHooks(t *testing.T) {
	h := mustLoad(t, "SYSTEM_PROMPT = 'sys'\nUSER_PROMPT = 'Question: {question}'\n", Options{})
	transcript := []schemas.Message{{Role: "user", Content: "Question: 2+2?"}, {Role: "assistant", Content: "4?"}}
	tests := []struct {
		hook string
		args []any
		want string
	}{
		{"format_observation", []any{map[string]any{"question": "2+2?", "extra": 1}}, `"Question: 2+2?"`},
		{"format_observation", []any{"already text"}, `"already text"`},
		{"build_messages", []any{state(transcript...)}, `[{"content": "sys", "role": "system"}, {"content": "Question: 2+2?", "role": "user"}, {"content": "4?", "role": "assistant"}]`},
		{"parse_action", []any{"I think <answer>3</answer> no, <answer> 4 </answer>", state()}, `{"answer": "4", "end": 51, "kind": "answer"}`},
		{"parse_action", []any{"no tags", state()}, `{"error": "no <answer>...</answer> in the reply", "kind": "invalid"}`},
		{"format_tool_result", []any{map[string]any{"text": "result text"}, state()}, `"result text"`},
		{"format_tool_result", []any{map[string]any{"docs": []any{"a"}}, state()}, `"{\"docs\":[\"a\"]}"`},
		{"on_error", []any{"illegal", "e2e5 is not legal", state()}, `"That action is not allowed: e2e5 is not legal. Please reply again, following the required format."`},
		{"should_stop", []any{state()}, `False`},
	}
	for _, tt := range tests {
		t.Run(tt.hook, func(t *testing.T) {
			var rec CallRecord
			v, err := h.WithRecorder(func(r CallRecord) { rec = r }).Call(bg, tt.hook, tt.args...)
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if got := Summarize(v, 1000); got != tt.want {
				t.Errorf("result %s, want %s", got, tt.want)
			}
			if !rec.Default || rec.Hook != tt.hook {
				t.Errorf("record %+v, want a default call of %s", rec, tt.hook)
			}
		})
	}
	// A default that fails says so.
	_, err := h.Call(bg, "build_messages", map[string]any{"turn": 0})
	if he := hookErr(t, err); !errors.Is(err, ErrRuntime) || !strings.Contains(he.Msg, `state["messages"]`) {
		t.Errorf("default build_messages without messages: %v", err)
	}
	// Missing template field.
	if _, err := h.Call(bg, "format_observation", map[string]any{"q": "x"}); err == nil || !strings.Contains(err.Error(), "question") {
		t.Errorf("format_observation without question: %v", err)
	}
}

func TestDefaultsModule(t *testing.T) {
	src := `
SYSTEM_PROMPT = defaults.SYSTEM_PROMPT + " Be brief."
def on_error(kind, detail, state):
    return "[" + kind + "] " + defaults.on_error(kind, detail, state)
def parse_action(text, state):
    a = defaults.parse_action(text=text, state=state)
    if a["kind"] == "invalid" and text.strip().isdigit():
        return {"kind": "answer", "answer": text.strip()}
    return a
`
	h := mustLoad(t, src, Options{})
	if got, want := h.String("SYSTEM_PROMPT"), Base().Constants[0].Default.(string)+" Be brief."; got != want {
		t.Errorf("SYSTEM_PROMPT = %q, want %q", got, want)
	}
	v, err := h.Call(bg, "on_error", "format", "no tags", state())
	if err != nil || !strings.HasPrefix(v.(string), "[format] Your reply could not be understood: no tags") {
		t.Errorf("on_error = %v, %v", v, err)
	}
	for text, want := range map[string]string{" 42 ": "42", "<answer>7</answer>": "7"} {
		v, err := h.Call(bg, "parse_action", text, state())
		if a, _ := ActionFrom(v); err != nil || a.Kind != "answer" || a.Answer != want {
			t.Errorf("parse_action(%q) = %v, %v", text, v, err)
		}
	}
	le := loadErr(t, "X = defaults.should_stop({})\n", Options{})
	wantContains(t, "error", le.Error(), "cannot be called while the module loads")
}

func TestHelpers(t *testing.T) {
	src := `
def format_observation(obs):
    moves = legal_moves(obs["fen"])
    return USER_PROMPT.format(**obs) + "\nLegal: " + " ".join(moves)
def format_tool_result(result, state):
    return str(legal_moves(fen=result["fen"]))
def on_error(kind, detail, state):
    return legal_moves("")
def should_stop(state):
    return legal_moves()
`
	h := mustLoad(t, src, Options{Contract: testContract()})
	v, err := h.Call(bg, "format_observation", map[string]any{"question": "Best move?", "fen": "startpos"})
	if err != nil || v != "Q: Best move?\nBoard: startpos\nLegal: e2e4 d2d4" {
		t.Errorf("format_observation = %q, %v", v, err)
	}
	if v, err := h.Call(bg, "format_tool_result", map[string]any{"fen": "x"}, state()); err != nil || v != `["e2e4", "d2d4"]` {
		t.Errorf("keyword argument: %q, %v", v, err)
	}
	_, err = h.Call(bg, "on_error", "format", "", state())
	if he := hookErr(t, err); !errors.Is(err, ErrRuntime) || he.Pos.Line != 8 || !strings.Contains(he.Msg, "empty FEN") {
		t.Errorf("helper error: %v", err)
	}
	_, err = h.Call(bg, "should_stop", state())
	wantContains(t, "missing argument", fmt.Sprint(err), "legal_moves: missing argument for fen")
}

func TestCallArguments(t *testing.T) {
	h := mustLoad(t, "", Options{})
	if _, err := h.Call(bg, "no_such_hook"); !errors.Is(err, ErrUnknownHook) {
		t.Errorf("unknown hook: %v", err)
	}
	if _, err := h.Call(bg, "parse_action", "only text"); !errors.Is(err, ErrBadArgs) {
		t.Errorf("wrong argument count: %v", err)
	}
	h = mustLoad(t, "def should_stop(state):\n    return False\n", Options{})
	if _, err := h.Call(bg, "should_stop", make(chan int)); !errors.Is(err, ErrBadArgs) {
		t.Errorf("unconvertible argument: %v", err)
	}
	if _, err := h.Call(bg, "should_stop", strings.Repeat("x", DefaultMaxValueBytes+1)); !errors.Is(err, ErrBadArgs) {
		t.Errorf("oversized argument: %v", err)
	}
}

func TestRecorderSeesEveryCall(t *testing.T) {
	src := `
def parse_action(text, state):
    print("parsing", len(text))
    if text == "boom":
        fail("boom")
    return {"kind": "answer", "answer": text}
`
	var mu sync.Mutex
	var base []CallRecord
	h := mustLoad(t, src, Options{Recorder: func(r CallRecord) { mu.Lock(); base = append(base, r); mu.Unlock() }})
	var episode []CallRecord
	ep := h.WithRecorder(func(r CallRecord) { episode = append(episode, r) })

	_, _ = ep.Call(bg, "parse_action", "42", state())
	_, _ = ep.Call(bg, "parse_action", "boom", state())
	_, _ = ep.Call(bg, "should_stop", state())
	_, _ = h.Call(bg, "should_stop", state())

	if len(base) != 1 || len(episode) != 3 {
		t.Fatalf("base saw %d calls, episode %d; want 1 and 3", len(base), len(episode))
	}
	ok, failed, def := episode[0], episode[1], episode[2]
	if ok.Hook != "parse_action" || ok.Default || ok.Steps == 0 || ok.Err != nil || ok.Duration <= 0 {
		t.Errorf("ok record %+v", ok)
	}
	wantContains(t, "args", ok.Args, `text="42"`, `state={`)
	wantContains(t, "result", ok.Result, `"answer": "42"`)
	wantContains(t, "output", ok.Output, "parsing 2")
	if failed.Err == nil || failed.Result != "" {
		t.Errorf("failed record %+v", failed)
	}
	// A Go default's record names the state and does not summarize it.
	if !def.Default || def.Steps != 0 || def.Result != "False" || def.Args != "state" || def.TraceEvent(0).Action != "should_stop(state)" {
		t.Errorf("default record %+v", def)
	}
	ev := failed.TraceEvent(3)
	if ev.Turn != 3 || ev.Kind != "hook" || !strings.HasPrefix(ev.Action, "parse_action(text=\"boom\"") {
		t.Errorf("trace event %+v", ev)
	}
	wantContains(t, "feedback", ev.Feedback, "error: hook parse_action (h.star:5:", "boom", "steps", "print: parsing 4")
	wantContains(t, "default feedback", def.TraceEvent(0).Feedback, "False [default")
}

func TestConcurrentCalls(t *testing.T) {
	src := `
def build_messages(state):
    out = [{"role": "system", "content": SYSTEM_PROMPT}]
    for m in state["messages"][-4:]:
        out.append({"role": m["role"], "content": truncate(m["content"], 50)})
    return out
`
	h := mustLoad(t, src, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			count := 0
			ep := h.WithRecorder(func(CallRecord) { count++ })
			for i := 0; i < 50; i++ {
				msgs := []schemas.Message{{Role: "user", Content: fmt.Sprintf("g%d i%d", g, i)}}
				v, err := ep.Call(bg, "build_messages", state(msgs...))
				if err != nil {
					errs <- err
					return
				}
				got, _ := MessagesFrom(v)
				if len(got) != 2 || got[1].Content != fmt.Sprintf("g%d i%d", g, i) {
					errs <- fmt.Errorf("goroutine %d call %d: %v", g, i, got)
					return
				}
			}
			if count != 50 {
				errs <- fmt.Errorf("goroutine %d recorded %d calls", g, count)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestHeapLimit(t *testing.T) {
	runtime.GC()
	limit := heapBytes() + 16<<20
	// At most 80 MB even if the check never fires, so a failure cannot
	// take the machine down.
	src := `
def should_stop(state):
    parts = []
    for i in range(4000):
        parts.append("x" * 10000 + str(i))
    return len(parts) > 0
`
	h := mustLoad(t, src, Options{MaxHeapBytes: limit})
	_, err := h.Call(bg, "should_stop", state())
	if !errors.Is(err, ErrMemory) {
		t.Fatalf("error %v, want ErrMemory", err)
	}
	runtime.GC()
	// The same code under a generous limit finishes.
	h = mustLoad(t, "def should_stop(state):\n    return len(['x' * 1000 for i in range(100)]) > 0\n", Options{MaxHeapBytes: heapBytes() + 1<<30})
	if v, err := h.Call(bg, "should_stop", state()); err != nil || v != true {
		t.Errorf("small allocation under a heap limit: %v, %v", v, err)
	}
}

// A record shows the state a harness hook was given, and names it alone
// for a Go default.
func TestRecordShowsTheStateTheHookSaw(t *testing.T) {
	cases := []struct {
		name, src, hook string
		args            func(*State) []any
		wantArgs        string // exact, or a prefix ending in "{"
	}{
		{"harness hook reading the state", "def should_stop(state):\n    return state[\"turn\"] > 3\n", "should_stop",
			func(st *State) []any { return []any{st.Dict()} }, `state={`},
		{"harness hook ignoring the state", "def parse_action(text, state):\n    return {\"kind\": \"answer\", \"answer\": text}\n", "parse_action",
			func(st *State) []any { return []any{"42", st.Dict()} }, `text="42", state={`},
		{"Go default", "", "should_stop",
			func(st *State) []any { return []any{st.Dict()} }, `state`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var recs []CallRecord
			h := mustLoad(t, tc.src, Options{}).WithRecorder(func(r CallRecord) { recs = append(recs, r) })
			st := &State{Task: map[string]any{"id": "t1", "question": "2+2?", "meta": map[string]any{}}, Messages: []schemas.Message{{Role: "user", Content: "2+2?"}}}
			if _, err := h.Call(bg, tc.hook, tc.args(st)...); err != nil {
				t.Fatal(err)
			}
			got := recs[0].Args
			if want, prefix := strings.CutSuffix(tc.wantArgs, "{"); prefix {
				if !strings.HasPrefix(got, tc.wantArgs) || len(got) <= len(want)+2 {
					t.Errorf("args %q, want a summary after %q", got, want)
				}
			} else if got != tc.wantArgs {
				t.Errorf("args %q, want %q", got, tc.wantArgs)
			}
		})
	}
}
