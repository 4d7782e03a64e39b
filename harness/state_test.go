package harness

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// exampleEpisodeState is a state with messages of every kind (tool calls,
// names, quotes, non-ASCII, long text), an action and retries.
func exampleEpisodeState() *State {
	return &State{
		Task: map[string]any{"id": "t1", "question": "Wer schrieb \"Faust\"?", "meta": map[string]any{"rating": int64(1500), "tags": []any{"x", 2.5}, "n": json.Number("7")}},
		Turn: 2,
		Messages: []schemas.Message{
			{Role: "user", Content: "Wer schrieb \"Faust\"?"},
			{Role: "assistant", Content: "<search>faust</search>"},
			{Role: "user", Content: strings.Repeat("é\"x\n", 90)},
			{Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"goethe"}`}, {Name: "calc"}}},
			{Role: "tool", Content: "r", Name: "search", ToolCallID: "c1"},
		},
		LastAction:    map[string]any{"kind": "tool", "tool": "search", "input": "faust", "args": map[string]any{"q": "faust", "k": 3.0}},
		FormatRetries: 1, IllegalRetries: 2,
	}
}

// The state dict has the keys of Base's StateDoc; a harness hook sees it
// as Starlark values (messages role first), a Go default as plain Go.
func TestStateDict(t *testing.T) {
	var got any
	c := Base().Extend(Contract{Hooks: []HookSpec{{
		Name: "should_stop", Params: []string{"state"}, Returns: BoolOrNone,
		Default: func(_ context.Context, _ *Harness, args []any) (any, error) {
			got = args[0]
			return false, nil
		},
	}}})
	h := mustLoad(t, "def on_error(kind, detail, state):\n    return repr(state)\n", Options{Contract: c})
	st := exampleEpisodeState()
	r, err := h.Call(bg, "on_error", "format", "x", st.Dict())
	if err != nil {
		t.Fatal(err)
	}
	repr := r.(string)
	for _, want := range []string{
		`{"last_action": {"args": {"k": 3.0, "q": "faust"}, "input": "faust", "kind": "tool", "tool": "search"}, "messages": [{"role": "user", "content": "Wer schrieb \"Faust\"?"}`,
		`{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "arguments": "{\"q\":\"goethe\"}"}, {"id": "", "name": "calc", "arguments": ""}]}`,
		`{"role": "tool", "content": "r", "name": "search", "tool_call_id": "c1"}], "retries": {"format": 1, "illegal": 2}, "task": {"id": "t1", "meta": {"n": 7, "rating": 1500, "tags": ["x", 2.5]}, "question": "Wer schrieb \"Faust\"?"}, "turn": 2}`,
	} {
		if !strings.Contains(repr, want) {
			t.Errorf("harness hook saw\n%s\nwant it to contain\n%s", repr, want)
		}
	}
	if _, err := h.Call(bg, "should_stop", st.Dict()); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"task":        map[string]any{"id": "t1", "question": "Wer schrieb \"Faust\"?", "meta": map[string]any{"rating": int64(1500), "tags": []any{"x", 2.5}, "n": int64(7)}},
		"turn":        int64(2),
		"messages":    MessageDicts(st.Messages),
		"last_action": st.LastAction,
		"retries":     map[string]any{"format": int64(1), "illegal": int64(2)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("default saw %#v, want %#v", got, want)
	}
	// No action is None, not an empty dict.
	st.LastAction = nil
	if d := st.Dict(); d["last_action"] != nil {
		t.Errorf("last_action = %#v, want nil", d["last_action"])
	}
}

// MessagesFrom is MessageDict's inverse.
func TestMessageDictRoundTrip(t *testing.T) {
	msgs := exampleEpisodeState().Messages
	got, err := MessagesFrom(MessageDicts(msgs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, msgs) {
		t.Errorf("MessagesFrom(MessageDicts(m)) = %#v, want %#v", got, msgs)
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
	st := &State{Task: task, Messages: msgs, LastAction: action}
	first, err := h.Call(bg, "on_error", "format", "", st.Dict())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		again, err := h.Call(bg, "on_error", "format", "", st.Dict())
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
}

// stateHookArgs are the arguments of hook with st as its state.
func stateHookArgs(hook string, st *State) []any {
	switch hook {
	case "on_error":
		return []any{"format", "", st.Dict()}
	case "parse_action":
		return []any{"a", st.Dict()}
	}
	return []any{st.Dict()}
}

// A state too large for the budget fails every kind of hook the same way,
// whether it reads the state or not.
func TestStateBudget(t *testing.T) {
	src := "def on_error(kind, detail, state):\n    return repr(state)\n\ndef parse_action(text, state):\n    return {\"kind\": \"answer\", \"answer\": text}\n"
	h := mustLoad(t, src, Options{MaxValueBytes: 1000})
	st := &State{Task: map[string]any{"id": "t", "question": "q", "meta": map[string]any{}}}
	st.Messages = []schemas.Message{{Role: "user", Content: strings.Repeat("x", 600)}}
	for _, hook := range []string{"on_error", "parse_action", "build_messages"} {
		if _, err := h.Call(bg, hook, stateHookArgs(hook, st)...); err != nil {
			t.Errorf("%s under the budget: %v", hook, err)
		}
	}
	st.Messages = []schemas.Message{{Role: "user", Content: strings.Repeat("x", 600)}, {Role: "user", Content: strings.Repeat("y", 600)}}
	for _, hook := range []string{"on_error", "parse_action", "build_messages"} {
		_, err := h.Call(bg, hook, stateHookArgs(hook, st)...)
		if !errors.Is(err, ErrBadArgs) || !strings.Contains(err.Error(), `argument state: ["messages"]: [1]: ["content"]: value too large`) {
			t.Errorf("%s over the budget: %v, want ErrBadArgs naming the state", hook, err)
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
			st := &State{Task: map[string]any{"id": "t", "question": "q", "meta": map[string]any{}}}
			st.Messages = exampleState(4)["messages"].([]schemas.Message)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				st.Turn = i
				if _, err := h.Call(bg, "parse_action", "a", st.Dict()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
