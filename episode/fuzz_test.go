package episode

import (
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// FuzzNativeAction: whatever arguments a model writes, a native tool call
// becomes either a tool action the harness accepts or an error, never a
// panic.
func FuzzNativeAction(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"query": "x"}`, `{"q": 1}`, `{"a": "x", "b": "y"}`, `[1]`, `"str"`, `{"query": "x"`, `{"n": 1e999}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		a, err := nativeAction(schemas.ToolCall{ID: "c1", Name: "search", Arguments: args})
		if err != nil {
			return
		}
		if a.Kind != "tool" || a.Tool != "search" || a.ID != "c1" || a.Args == nil {
			t.Fatalf("action %+v", a)
		}
		if err := harness.ActionShape.Validate(a.Raw, "action"); err != nil {
			t.Fatalf("raw action %v: %v", a.Raw, err)
		}
		if a.Input != "" && len(a.Args) != 1 {
			t.Fatalf("input %q from %d arguments", a.Input, len(a.Args))
		}
	})
}

// FuzzDecodeMeta: a task's meta column is a dict or an error.
func FuzzDecodeMeta(f *testing.F) {
	for _, s := range []string{``, `  `, `{}`, `null`, `{"fen": "8/8/8/8/8/8/8/8 w - - 0 1", "rating": 1500}`, `[1]`, `1`, `{"a": {"b": [1, 2.5, true, null]}}`, `{"a":`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		m, err := decodeMeta(meta)
		if err == nil && m == nil {
			t.Fatalf("meta %q: nil dict without an error", meta)
		}
	})
}
