package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// stateStep is one change of an episode's state, applied to a *State and
// to the dict a caller would build instead.
type stateStep struct {
	name string
	do   func(s *State, d map[string]any)
}

// stateSteps walks a state through what an episode does to it: messages of
// every kind (tool calls, names, quotes, non-ASCII, long text), actions
// that come and go, retries and turns.
func stateSteps() (task map[string]any, steps []stateStep) {
	task = map[string]any{"id": "t1", "question": "Wer schrieb \"Faust\"?", "meta": map[string]any{"rating": int64(1500), "tags": []any{"x", 2.5}, "n": json.Number("7")}}
	var msgs []schemas.Message
	add := func(m ...schemas.Message) stateStep {
		return stateStep{"add " + m[0].Role, func(s *State, d map[string]any) {
			msgs = append(msgs, m...)
			s.SetMessages(msgs)
			d["messages"] = msgs[:len(msgs):len(msgs)]
		}}
	}
	action := func(a map[string]any) stateStep {
		return stateStep{fmt.Sprintf("action %v", a), func(s *State, d map[string]any) {
			s.SetLastAction(a)
			if a == nil {
				d["last_action"] = nil
			} else {
				d["last_action"] = a
			}
		}}
	}
	turn := func(n int) stateStep {
		return stateStep{fmt.Sprintf("turn %d", n), func(s *State, d map[string]any) { s.SetTurn(n); d["turn"] = n }}
	}
	retries := func(f, i int) stateStep {
		return stateStep{fmt.Sprintf("retries %d %d", f, i), func(s *State, d map[string]any) {
			s.SetRetries(f, i)
			d["retries"] = map[string]any{"format": f, "illegal": i}
		}}
	}
	long := strings.Repeat("é\"x\n", 90)
	steps = []stateStep{
		{"start", func(*State, map[string]any) {}},
		add(schemas.Message{Role: "user", Content: "Wer schrieb \"Faust\"?"}),
		turn(1),
		add(schemas.Message{Role: "assistant", Content: "<search>faust</search>"}),
		action(map[string]any{"kind": "tool", "tool": "search", "input": "faust", "args": map[string]any{"q": "faust", "k": 3.0}}),
		add(schemas.Message{Role: "user", Content: long}),
		turn(2),
		add(schemas.Message{Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"goethe"}`}, {Name: "calc"}}}),
		add(schemas.Message{Role: "tool", Content: "r", Name: "search", ToolCallID: "c1"}, schemas.Message{Role: "tool", Content: "", ToolCallID: ""}),
		action(map[string]any{"kind": "invalid", "error": "no tag"}),
		retries(1, 0),
		retries(1, 2),
		action(nil),
		turn(3),
	}
	return task, steps
}

// stateHarness reads the whole state in a harness hook (on_error returns
// its repr, which shows types and key order) and in Go defaults.
func stateHarness(t *testing.T, opts Options) (*Harness, *[]any) {
	t.Helper()
	var got []any
	opts.Contract = Base().Extend(Contract{Hooks: []HookSpec{{
		Name: "should_stop", Params: []string{"state"}, Returns: BoolOrNone,
		Default: func(_ context.Context, _ *Harness, args []any) (any, error) {
			got = append(got, args[0])
			return false, nil
		},
	}}})
	h := mustLoad(t, "def on_error(kind, detail, state):\n    return repr(state)\n", opts)
	return h, &got
}

// A *State is the dict it stands for, to every kind of hook and in every
// record, however it got there.
func TestStateMatchesDict(t *testing.T) {
	var recs []CallRecord
	h, got := stateHarness(t, Options{})
	h = h.WithRecorder(func(r CallRecord) { recs = append(recs, r) })
	task, steps := stateSteps()
	st := NewState(task)
	d := map[string]any{"task": task, "turn": 0, "messages": []schemas.Message{}, "last_action": nil, "retries": map[string]any{"format": 0, "illegal": 0}}
	for _, step := range steps {
		step.do(st, d)
		t.Run(step.name, func(t *testing.T) {
			// Harness hooks.
			recs = recs[:0]
			want, err := h.Call(bg, "on_error", "format", "x", d)
			if err != nil {
				t.Fatal(err)
			}
			gotRepr, err := h.Call(bg, "on_error", "format", "x", st)
			if err != nil {
				t.Fatal(err)
			}
			if gotRepr != want {
				t.Errorf("harness hook saw\n%s\nwant\n%s", gotRepr, want)
			}
			if recs[0].Args != recs[1].Args {
				t.Errorf("record args %q, want %q", recs[1].Args, recs[0].Args)
			}
			// Go defaults: the state-aware base default and a domain's.
			*got = (*got)[:0]
			if _, err := h.Call(bg, "should_stop", st); err != nil {
				t.Fatal(err)
			}
			wantPlain, err := normalize(d)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual((*got)[0], wantPlain) {
				t.Errorf("default saw %#v, want %#v", (*got)[0], wantPlain)
			}
			wantMsgs, err := h.Call(bg, "build_messages", d)
			if err != nil {
				t.Fatal(err)
			}
			gotMsgs, err := h.Call(bg, "build_messages", st)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotMsgs, wantMsgs) {
				t.Errorf("build_messages = %v, want %v", gotMsgs, wantMsgs)
			}
			// BuildMessages records the default's call as Call does, and
			// leaves the messages to the caller.
			recs = recs[:0]
			if _, err := h.Call(bg, "build_messages", d); err != nil {
				t.Fatal(err)
			}
			v, def, err := h.BuildMessages(bg, st)
			if err != nil || !def || v != nil {
				t.Fatalf("BuildMessages = %v, %v, %v; want the default", v, def, err)
			}
			if len(recs) != 2 || recs[1].Args != recs[0].Args || recs[1].Result != recs[0].Result || !recs[1].Default {
				t.Errorf("BuildMessages recorded %+v, Call %+v", recs[1:], recs[:1])
			}
			if n := len(wantMsgs.([]any)); len(recs) == 2 && recs[1].Result != fmt.Sprintf("default context, %d messages", n) {
				t.Errorf("BuildMessages recorded the result %q for %d messages", recs[1].Result, n)
			}
			// The summary hook records keep is the plain dict's.
			if st.summary != Summarize(wantPlain, summaryLen/2) {
				t.Errorf("kept summary:\n%s\nwant\n%s", st.summary, Summarize(wantPlain, summaryLen/2))
			}
			// Summaries under any bound.
			for _, n := range []int{1, 10, 17, 40, 80, 120, 121, 200, 240, 5000} {
				want := Summarize(wantPlain, n)
				if got := Summarize(st, n); got != want {
					t.Errorf("Summarize under %d:\n%s\nwant\n%s", n, got, want)
				}
			}
		})
	}
}

// Every harness hook gets its own copy: what one call changes, the next
// does not see, and the caller's values stay as they were.
func TestStateCopiesAreIndependent(t *testing.T) {
	src := `
def on_error(kind, detail, state):
    before = repr(state)
    state["messages"][0]["content"] = "changed"
    state["messages"][1]["tool_calls"][0]["name"] = "changed"
    state["messages"].append({"role": "user", "content": "extra"})
    state["task"]["meta"]["tags"].append("y")
    state["task"]["id"] = "changed"
    state["last_action"]["args"]["q"] = "changed"
    state["retries"]["format"] = 99
    state["turn"] = 99
    return before
`
	h := mustLoad(t, src, Options{})
	task := map[string]any{"id": "t1", "question": "q", "meta": map[string]any{"tags": []any{"x"}}}
	msgs := []schemas.Message{{Role: "user", Content: "q"}, {Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "1", Name: "search", Arguments: "{}"}}}}
	action := map[string]any{"kind": "tool", "tool": "search", "args": map[string]any{"q": "x"}}
	st := NewState(task)
	st.SetMessages(msgs)
	st.SetLastAction(action)
	first, err := h.Call(bg, "on_error", "format", "", st)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		again, err := h.Call(bg, "on_error", "format", "", st)
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Fatalf("call %d saw\n%s\nafter the first saw\n%s", i+2, again, first)
		}
	}
	if task["id"] != "t1" || len(task["meta"].(map[string]any)["tags"].([]any)) != 1 || msgs[0].Content != "q" ||
		msgs[1].ToolCalls[0].Name != "search" || action["args"].(map[string]any)["q"] != "x" {
		t.Errorf("the caller's values changed: %v %v %v", task, msgs, action)
	}
	if m, _ := st.plainMap()["messages"].([]any); len(m) != 2 || m[0].(map[string]any)["content"] != "q" {
		t.Errorf("the plain state changed: %v", m)
	}
}

// A state too large for the budget fails every kind of hook the same way,
// whether it reads the state or not.
// stateHookArgs are the arguments of hook with st as its state.
func stateHookArgs(hook string, st *State) []any {
	switch hook {
	case "on_error":
		return []any{"format", "", st}
	case "parse_action":
		return []any{"a", st}
	}
	return []any{st}
}

func TestStateBudget(t *testing.T) {
	src := "def on_error(kind, detail, state):\n    return repr(state)\n\ndef parse_action(text, state):\n    return {\"kind\": \"answer\", \"answer\": text}\n"
	h := mustLoad(t, src, Options{MaxValueBytes: 1000})
	st := NewState(map[string]any{"id": "t", "question": "q", "meta": map[string]any{}})
	st.SetMessages([]schemas.Message{{Role: "user", Content: strings.Repeat("x", 600)}})
	for _, hook := range []string{"on_error", "parse_action", "build_messages"} {
		if _, err := h.Call(bg, hook, stateHookArgs(hook, st)...); err != nil {
			t.Errorf("%s under the budget: %v", hook, err)
		}
	}
	st.SetMessages([]schemas.Message{{Role: "user", Content: strings.Repeat("x", 600)}, {Role: "user", Content: strings.Repeat("y", 600)}})
	for _, hook := range []string{"on_error", "parse_action", "build_messages"} {
		_, err := h.Call(bg, hook, stateHookArgs(hook, st)...)
		if !errors.Is(err, ErrBadArgs) || !strings.Contains(err.Error(), "argument state: value too large") {
			t.Errorf("%s over the budget: %v, want ErrBadArgs naming the state", hook, err)
		}
	}
}

// unreadParams finds the arguments a hook's code cannot see, and only
// those.
func TestUnreadParams(t *testing.T) {
	cases := []struct {
		src  string
		want []bool // for parse_action(text, state); nil: both read
	}{
		{"def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text}\n", []bool{false, true}},
		{"def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text + str(state['turn'])}\n", nil},
		{"def parse_action(text, st):\n    f = lambda: st\n    return {'kind': 'answer', 'answer': text}\n", nil},
		{"def parse_action(text, state):\n    def inner():\n        return state\n    return {'kind': 'answer', 'answer': text}\n", nil},
		{"def parse_action(*args):\n    return {'kind': 'answer', 'answer': args[0]}\n", nil},
		{"def parse_action(text, *rest):\n    return {'kind': 'answer', 'answer': text}\n", nil},
		{"def _p(reply, ignored):\n    return {'kind': 'answer', 'answer': reply}\nparse_action = _p\n", []bool{false, true}},
		{"parse_action = lambda text, state: {'kind': 'answer', 'answer': text}\n", []bool{false, true}},
		{"def parse_action(text, state, extra=None):\n    return {'kind': 'answer', 'answer': 'x'}\n", []bool{true, true}},
		{"def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text, 'state': 1}\n", []bool{false, true}},
		{"def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text, 'n': len([state for state in [1]])}\n", nil},
	}
	for _, tc := range cases {
		h := mustLoad(t, tc.src, Options{})
		if got := h.calls["parse_action"].unread; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("unread = %v, want %v\n%s", got, tc.want, tc.src)
		}
		// The hook works either way.
		st := NewState(map[string]any{"id": "t", "question": "q", "meta": map[string]any{}})
		st.SetTurn(1)
		if _, err := h.Call(bg, "parse_action", "a", st); err != nil {
			t.Errorf("call: %v\n%s", err, tc.src)
		}
	}
}

func BenchmarkCallStateHook(b *testing.B) {
	for _, bc := range []struct{ name, src string }{
		{"reads_state", "def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text + str(len(state['messages']))}\n"},
		{"ignores_state", "def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text}\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := mustLoad(b, bc.src, Options{})
			h = h.WithRecorder(func(CallRecord) {})
			st := NewState(map[string]any{"id": "t", "question": "q", "meta": map[string]any{}})
			st.SetMessages(exampleState(4)["messages"].([]schemas.Message))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				st.SetTurn(i) // a new version each call, as in an episode
				if _, err := h.Call(bg, "parse_action", "a", st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BuildMessages is Call for a harness's own build_messages.
func TestBuildMessagesDefined(t *testing.T) {
	src := "def build_messages(state):\n    return [{'role': 'user', 'content': str(len(state['messages']))}]\n"
	var recs []CallRecord
	h := mustLoad(t, src, Options{}).WithRecorder(func(r CallRecord) { recs = append(recs, r) })
	st := NewState(map[string]any{"id": "t", "question": "q", "meta": map[string]any{}})
	st.SetMessages([]schemas.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}})
	v, def, err := h.BuildMessages(bg, st)
	want := []any{map[string]any{"role": "user", "content": "2"}}
	if err != nil || def || !reflect.DeepEqual(v, want) {
		t.Fatalf("BuildMessages = %v, %v, %v; want %v", v, def, err, want)
	}
	if len(recs) != 1 || recs[0].Default || recs[0].Steps == 0 {
		t.Errorf("records %+v", recs)
	}
	// Over budget, the default fails as Call would.
	h = mustLoad(t, "", Options{MaxValueBytes: 10})
	if _, _, err := h.BuildMessages(bg, st); !errors.Is(err, ErrBadArgs) {
		t.Errorf("over budget: %v", err)
	}
}
