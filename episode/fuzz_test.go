package episode

import (
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// FuzzNativeAction: whatever name and arguments a model writes, a native
// tool call becomes either a tool action whose arguments match the tool's
// parameters or a problem to tell the model, never a panic.
func FuzzNativeAction(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"query": "x"}`, `{"q": 1}`, `{"a": "x", "b": "y"}`, `[1]`, `"str"`, `{"query": "x"`, `{"n": 1e999}`, `{"query": 7}`} {
		f.Add("search", s)
	}
	f.Add("grep", `{"query": "x"}`)
	l := &loop{h: loadHarness(f, nativeSrc)}
	f.Fuzz(func(t *testing.T, name, args string) {
		a, problem := l.nativeAction(schemas.ToolCall{ID: "c1", Name: name, Arguments: args})
		if problem != "" {
			return
		}
		if a.Kind != "tool" || a.Tool != "search" || a.ID != "c1" || a.Args == nil {
			t.Fatalf("action %+v", a)
		}
		if q, ok := a.Args["query"].(string); !ok || len(q) > 400 {
			t.Fatalf("arguments %v pass the schema", a.Args)
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
