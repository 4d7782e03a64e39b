package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"go.starlark.net/starlark"

	"github.com/whalerun/whale/schemas"
)

// roundTrip is what normalize did before it copied common types directly:
// a conversion to Starlark and back.
func roundTrip(v any) (any, error) {
	sv, err := ToStarlark(v)
	if err != nil {
		return nil, err
	}
	return FromStarlark(sv)
}

type point struct {
	X int    `json:"x"`
	Y string `json:"y,omitempty"`
}

func TestNormalizeMatchesRoundTrip(t *testing.T) {
	selfList := []any{nil}
	selfList[0] = selfList
	cases := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"scalars", []any{true, 1, int32(-2), int64(3), 2.5, "s", uint8(7), float32(0.5)}},
		{"json numbers", map[string]any{"i": json.Number("12"), "f": json.Number("1.5e3"), "list": []any{json.Number("-4")}}},
		{"bad json number", json.Number("1x")},
		{"nested", map[string]any{"a": map[string]any{"b": []any{map[string]any{}, []any{}}}, "": nil}},
		{"message", schemas.Message{Role: "user", Content: "hi"}},
		{"message pointer", &schemas.Message{Role: "tool", Content: "r", Name: "search", ToolCallID: "c1"}},
		{"nil message pointer", (*schemas.Message)(nil)},
		{"messages with tool calls", []schemas.Message{
			{Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "1", Name: "search", Arguments: `{"q":"x"}`}, {Name: "calc"}}},
			{Role: "tool", Content: "r", ToolCallID: "1"},
		}},
		{"tool call", schemas.ToolCall{ID: "7", Name: "n", Arguments: "{}"}},
		{"typed slice and map", map[string]any{"s": []string{"a", "b"}, "m": map[string]int{"k": 1}, "nil": []string(nil)}},
		{"struct", point{X: 1, Y: "y"}},
		{"struct pointer", &point{X: 2}},
		{"bytes", []byte("text")},
		{"starlark value", starlark.NewList([]starlark.Value{starlark.MakeInt(1), starlark.String("x")})},
		{"uint too big", uint64(1 << 63)},
		{"channel", make(chan int)},
		{"int keys", map[int]string{1: "a"}},
		{"self-containing list", selfList},
		{"too many bytes", []any{strings.Repeat("x", DefaultMaxValueBytes/2), strings.Repeat("y", DefaultMaxValueBytes/2+1)}},
		{"too many items", make([]any, DefaultMaxValueItems+1)},
		{"key bytes count", map[string]any{strings.Repeat("k", DefaultMaxValueBytes): ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := roundTrip(tc.v)
			got, err := normalize(tc.v)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("normalize error %v, round trip error %v", err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("normalize = %#v, round trip = %#v", got, want)
			}
		})
	}
}

func TestNormalizeCopies(t *testing.T) {
	in := map[string]any{"list": []any{"a"}, "dict": map[string]any{"k": "v"}}
	out, err := normalize(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	m["list"].([]any)[0] = "changed"
	m["dict"].(map[string]any)["k"] = "changed"
	m["new"] = 1
	if in["list"].([]any)[0] != "a" || in["dict"].(map[string]any)["k"] != "v" || len(in) != 2 {
		t.Errorf("changing the copy changed the original: %v", in)
	}
}

// A default gets its arguments as plain Go, and its result is validated.
func TestDefaultArguments(t *testing.T) {
	var got []any
	c := Base().Extend(Contract{Hooks: []HookSpec{{
		Name: "should_stop", Params: []string{"state"}, Returns: BoolOrNone,
		Default: func(_ context.Context, _ *Harness, args []any) (any, error) {
			got = args
			return args[0].(map[string]any)["stop"], nil
		},
	}}})
	h := mustLoad(t, "", Options{Contract: c})
	plainState := map[string]any{"stop": true, "messages": []any{map[string]any{"role": "user", "content": "x"}}}
	if v, err := h.Call(bg, "should_stop", plainState); err != nil || v != true {
		t.Fatalf("should_stop = %v, %v", v, err)
	}
	if !reflect.DeepEqual(got[0], plainState) {
		t.Errorf("default got %#v, want %#v", got[0], plainState)
	}
	goState := map[string]any{"stop": false, "turn": 3, "messages": []schemas.Message{{Role: "user", Content: "x"}}}
	if v, err := h.Call(bg, "should_stop", goState); err != nil || v != false {
		t.Fatalf("should_stop = %v, %v", v, err)
	}
	want := map[string]any{"stop": false, "turn": int64(3), "messages": []any{map[string]any{"role": "user", "content": "x"}}}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("default got %#v, want %#v", got[0], want)
	}
	if _, err := h.Call(bg, "should_stop", map[string]any{"stop": "yes"}); err == nil || !strings.Contains(err.Error(), "default must return") {
		t.Errorf("bad default result: %v", err)
	}
}

func TestSummarize(t *testing.T) {
	long := strings.Repeat("é", 200)
	cases := []struct {
		name    string
		v       any
		n       int
		want    string // exact, when set
		prefix  string
		maxSize int
	}{
		{name: "scalars", v: []any{nil, true, false, int64(-3), 7, 1.5, "q\""}, n: 100, want: `[None, True, False, -3, 7, 1.5, "q\""]`},
		{name: "sorted keys", v: map[string]any{"b": int64(2), "a": "x"}, n: 100, want: `{"a": "x", "b": 2}`},
		{name: "message", v: schemas.Message{Role: "user", Content: "hi"}, n: 100, want: `{"content": "hi", "role": "user"}`},
		{name: "messages", v: []schemas.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}, n: 100,
			want: `[{"content": "a", "role": "user"}, {"content": "b", "role": "assistant"}]`},
		{name: "struct", v: point{X: 1}, n: 100, want: `{"x": 1}`},
		{name: "unconvertible", v: make(chan int), n: 100, want: "<chan int>"},
		{name: "long string", v: long, n: 40, prefix: `"ééé`, maxSize: 40 + len("…")},
		{name: "long list", v: []any{long, long, long}, n: 60, prefix: `["éé`, maxSize: 60 + len("…")},
		{name: "many keys", v: func() map[string]any {
			m := map[string]any{}
			for i := range 40 {
				m[fmt.Sprintf("k%02d", i)] = int64(i)
			}
			return m
		}(), n: 50, prefix: `{"k00": 0, "k01": 1`, maxSize: 50 + len("…")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.v, tc.n)
			if tc.want != "" && got != tc.want {
				t.Errorf("Summarize = %s, want %s", got, tc.want)
			}
			if !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("Summarize = %s, want prefix %s", got, tc.prefix)
			}
			if tc.maxSize > 0 && (len(got) > tc.maxSize || !strings.HasSuffix(got, "…")) {
				t.Errorf("Summarize = %s (%d bytes), want at most %d ending in …", got, len(got), tc.maxSize)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Summarize = %q is not valid UTF-8", got)
			}
		})
	}
}

func TestTraceEventFeedback(t *testing.T) {
	cases := []struct {
		rec  CallRecord
		want string
	}{
		{CallRecord{Hook: "h", Default: true, Result: "False", Duration: 1500}, "False [default, 2µs]"},
		{CallRecord{Hook: "h", Steps: 12, Result: `"x"`, Duration: 2e6, Output: "hi\n"}, `"x" [12 steps, 2ms] print: hi`},
		{CallRecord{Hook: "h", Err: fmt.Errorf("boom"), Steps: 1}, "error: boom [1 steps, 0s]"},
	}
	for _, tc := range cases {
		if got := tc.rec.TraceEvent(1).Feedback; got != tc.want {
			t.Errorf("Feedback = %q, want %q", got, tc.want)
		}
	}
}

func BenchmarkNormalizeState(b *testing.B) {
	st := exampleState(8)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := normalize(st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSummarizeState(b *testing.B) {
	st := exampleState(8)
	b.ReportAllocs()
	for b.Loop() {
		_ = Summarize(st, summaryLen/2)
	}
}
