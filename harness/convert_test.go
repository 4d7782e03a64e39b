package harness

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"github.com/whalerun/whale/schemas"
)

func TestConvertRoundTrip(t *testing.T) {
	type taskView struct {
		ID       string         `json:"id"`
		Question string         `json:"question"`
		Meta     map[string]any `json:"meta"`
		Rating   int            `json:"rating"`
		skipped  int
	}
	tests := []struct {
		name string
		in   any
		repr string // Starlark repr
		out  any    // Go value after the round trip
	}{
		{"nil", nil, "None", nil},
		{"bool", true, "True", true},
		{"int", 42, "42", int64(42)},
		{"int32", int32(-7), "-7", int64(-7)},
		{"int64 max", int64(math.MaxInt64), "9223372036854775807", int64(math.MaxInt64)},
		{"uint8", uint8(200), "200", int64(200)},
		{"float", 2.5, "2.5", 2.5},
		{"float32", float32(0.5), "0.5", 0.5},
		{"string", "héllo\n", `"héllo\n"`, "héllo\n"},
		{"bytes", []byte("raw"), `"raw"`, "raw"},
		{"empty list", []any{}, "[]", []any{}},
		{"nil slice", []string(nil), "[]", []any{}},
		{"strings", []string{"a", "b"}, `["a", "b"]`, []any{"a", "b"}},
		{"ints", []int{1, 2}, "[1, 2]", []any{int64(1), int64(2)}},
		{"mixed", []any{1, "x", nil, 1.5, false}, `[1, "x", None, 1.5, False]`, []any{int64(1), "x", nil, 1.5, false}},
		{"map sorted", map[string]any{"b": 1, "a": []any{"x"}}, `{"a": ["x"], "b": 1}`, map[string]any{"a": []any{"x"}, "b": int64(1)}},
		{"map of strings", map[string]string{"k": "v"}, `{"k": "v"}`, map[string]any{"k": "v"}},
		{"nested", map[string]any{"l": []map[string]int{{"x": 1}}}, `{"l": [{"x": 1}]}`, map[string]any{"l": []any{map[string]any{"x": int64(1)}}}},
		{"message", schemas.Message{Role: "user", Content: "hi"}, `{"role": "user", "content": "hi"}`, map[string]any{"role": "user", "content": "hi"}},
		{"message with tool calls", schemas.Message{Role: "assistant", Content: "", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"x"}`}}},
			`{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "arguments": "{\"q\":\"x\"}"}]}`,
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "c1", "name": "search", "arguments": `{"q":"x"}`}}}},
		{"tool message", schemas.Message{Role: "tool", Content: "r", ToolCallID: "c1", Name: "search"}, `{"role": "tool", "content": "r", "name": "search", "tool_call_id": "c1"}`,
			map[string]any{"role": "tool", "content": "r", "name": "search", "tool_call_id": "c1"}},
		{"messages", []schemas.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}, `[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]`,
			[]any{map[string]any{"role": "system", "content": "s"}, map[string]any{"role": "user", "content": "u"}}},
		{"struct via json tags", taskView{ID: "t", Question: "q", Meta: map[string]any{"fen": "8/8"}, Rating: 1500}, `{"id": "t", "meta": {"fen": "8/8"}, "question": "q", "rating": 1500}`,
			map[string]any{"id": "t", "meta": map[string]any{"fen": "8/8"}, "question": "q", "rating": int64(1500)}},
		{"pointer to struct", &taskView{ID: "p"}, `{"id": "p", "meta": None, "question": "", "rating": 0}`,
			map[string]any{"id": "p", "meta": nil, "question": "", "rating": int64(0)}},
		{"nil pointer", (*taskView)(nil), "None", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sv, err := ToStarlark(tt.in)
			if err != nil {
				t.Fatalf("ToStarlark: %v", err)
			}
			if got := sv.String(); got != tt.repr {
				t.Errorf("repr %s, want %s", got, tt.repr)
			}
			gv, err := FromStarlark(sv)
			if err != nil {
				t.Fatalf("FromStarlark: %v", err)
			}
			if !reflect.DeepEqual(gv, tt.out) {
				t.Errorf("round trip %#v, want %#v", gv, tt.out)
			}
			// A second round trip is the identity.
			sv2, _ := ToStarlark(gv)
			gv2, _ := FromStarlark(sv2)
			if !reflect.DeepEqual(gv2, gv) {
				t.Errorf("second round trip %#v, want %#v", gv2, gv)
			}
		})
	}
}

func TestFromStarlarkValues(t *testing.T) {
	tests := []struct {
		expr string
		want any
		err  string
	}{
		{`(1, "a")`, []any{int64(1), "a"}, ""},
		{`set([3, 1])`, []any{int64(3), int64(1)}, ""},
		{`b"xy"`, "xy", ""},
		{`range(3)`, []any{int64(0), int64(1), int64(2)}, ""},
		{`{"a": {"b": [None]}}`, map[string]any{"a": map[string]any{"b": []any{nil}}}, ""},
		{`{1: 2}`, nil, "dict key 1 is a int, want string"},
		{`{"k": len}`, nil, `["k"]: cannot return a Starlark builtin_function_or_method`},
		{`1 << 64`, nil, "does not fit in 64 bits"},
		{`re.compile("a")`, nil, "cannot return a Starlark re.Pattern"},
	}
	h := mustLoad(t, "", Options{})
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			th := &starlark.Thread{}
			v, err := starlark.EvalOptions(fileOptions, th, "e", tt.expr, h.predeclared)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FromStarlark(v)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromStarlark = %#v, %v; want %#v", got, err, tt.want)
			}
		})
	}
}

func TestConvertBounds(t *testing.T) {
	big := strings.Repeat("x", 1000)
	if _, err := toStarlark([]any{big, big}, newBudget(1500, 0), 0); err == nil || !strings.Contains(err.Error(), "more than 1500 bytes") {
		t.Errorf("bytes budget: %v", err)
	}
	if _, err := toStarlark(make([]int, 11), newBudget(0, 10), 0); err == nil || !strings.Contains(err.Error(), "more than 10 list elements") {
		t.Errorf("items budget: %v", err)
	}
	deep := any("leaf")
	for i := 0; i < maxDepth+2; i++ {
		deep = []any{deep}
	}
	if _, err := ToStarlark(deep); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("depth: %v", err)
	}
	for _, bad := range []any{make(chan int), func() {}, complex(1, 2), map[int]string{1: "x"}} {
		if _, err := ToStarlark(bad); err == nil {
			t.Errorf("ToStarlark(%T) accepted", bad)
		}
	}
	l := starlark.NewList(nil)
	_ = l.Append(l)
	if _, err := FromStarlark(l); err == nil || !strings.Contains(err.Error(), "contain itself") {
		t.Errorf("cyclic list: %v", err)
	}
	if _, err := fromStarlark(starlark.String(big), newBudget(10, 0), 0); err == nil {
		t.Error("fromStarlark ignored the byte budget")
	}
}

// Dict arguments built from Go maps iterate in sorted key order, so a hook
// that loops over a dict behaves the same on every run.
func TestMapArgumentsIterateDeterministically(t *testing.T) {
	h := mustLoad(t, "def format_observation(obs):\n    return \",\".join(obs.keys())\n", Options{})
	obs := map[string]any{}
	for _, k := range []string{"m", "c", "x", "a", "q", "b", "z", "k"} {
		obs[k] = 1
	}
	for i := 0; i < 20; i++ {
		v, err := h.Call(bg, "format_observation", obs)
		if err != nil || v != "a,b,c,k,m,q,x,z" {
			t.Fatalf("keys %v, %v", v, err)
		}
	}
}

func TestMessagesAndActionFrom(t *testing.T) {
	in := []schemas.Message{
		{Role: "system", Content: "s"},
		{Role: "assistant", Content: "", ToolCalls: []schemas.ToolCall{{ID: "1", Name: "search", Arguments: "{}"}}},
		{Role: "tool", Content: "r", ToolCallID: "1", Name: "search"},
	}
	v, _ := normalize(in)
	got, err := MessagesFrom(v)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Errorf("MessagesFrom = %+v, %v; want %+v", got, err, in)
	}
	if _, err := MessagesFrom([]any{map[string]any{"role": "x", "content": ""}}); err == nil {
		t.Error("MessagesFrom accepted a bad role")
	}
	a, err := ActionFrom(map[string]any{"kind": "tool", "tool": "search", "input": "q", "extra": int64(1)})
	if err != nil || a.Kind != "tool" || a.Tool != "search" || a.Input != "q" || a.Raw["extra"] != int64(1) {
		t.Errorf("ActionFrom = %+v, %v", a, err)
	}
	if _, err := ActionFrom(map[string]any{"kind": "move"}); err == nil {
		t.Error("ActionFrom accepted a move without move")
	}
}
