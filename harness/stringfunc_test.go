package harness

import (
	"context"
	"strings"
	"testing"
)

func TestStringFuncs(t *testing.T) {
	upper := StringFunc("s", strings.ToUpper)
	first := OptionalStringFunc("text", func(s string) (string, bool) {
		f := strings.Fields(s)
		if len(f) == 0 {
			return "", false
		}
		return f[0], true
	})
	tests := []struct {
		name string
		fn   HelperFunc
		arg  any
		want any
		err  string
	}{
		{"string", upper, "ab", "AB", ""},
		{"found", first, "x y", "x", ""},
		{"nothing is None", first, "  ", nil, ""},
		{"not a string", upper, 3, nil, "s: want a string, got int"},
		{"optional not a string", first, true, nil, "text: want a string, got bool"},
	}
	for _, tt := range tests {
		got, err := tt.fn(context.Background(), []any{tt.arg})
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}
