package harness

import (
	"strings"
	"testing"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		s, marker, side string
		n               int
		want            string
	}{
		{"hello world", "…", "end", 20, "hello world"},
		{"hello world", "…", "end", 11, "hello world"},
		{"hello world", "…", "end", 6, "hello…"},
		{"hello world", "...", "end", 8, "hello..."},
		{"hello world", "…", "start", 6, "…world"},
		{"hello world", "…", "middle", 6, "hel…ld"},
		{"hello world", "…", "middle", 7, "hel…rld"},
		{"héllo wörld", "…", "end", 4, "hél…"},
		{"日本語のテキスト", "…", "start", 3, "…スト"},
		{"hello", "[cut]", "end", 3, "hel"}, // marker longer than n: dropped
		{"hello", "…", "end", 0, ""},
	}
	for _, tt := range tests {
		got, err := truncate(tt.s, tt.n, tt.marker, tt.side)
		if err != nil || got != tt.want {
			t.Errorf("truncate(%q, %d, %q, %q) = %q, %v; want %q", tt.s, tt.n, tt.marker, tt.side, got, err, tt.want)
		}
	}
	if _, err := truncate("x", 1, "", "left"); err == nil {
		t.Error("bad side accepted")
	}
	// Through Starlark, with keywords.
	got, err := evalExpr(t, `truncate("abcdefgh", 5, marker="..", side="middle")`, Options{})
	if err != nil || got != `"ab..h"` {
		t.Errorf("truncate in Starlark = %s, %v", got, err)
	}
	if _, err := evalExpr(t, `truncate("abc", -1)`, Options{}); err == nil {
		t.Error("negative n accepted")
	}
}

func TestDedent(t *testing.T) {
	tests := []struct{ in, want string }{
		{"    a\n    b", "a\nb"},
		{"    a\n      b\n    c", "a\n  b\nc"},
		{"\n    a\n\n    b\n", "\na\n\nb\n"},
		{"  a\n    \n  b", "a\n\nb"},
		{"\ta\n\tb", "a\nb"},
		{"a\n  b", "a\n  b"},
		{"  \ta\n  b", "\ta\nb"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := dedent(tt.in); got != tt.want {
			t.Errorf("dedent(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	got, err := evalExpr(t, `dedent("""
        Solve:
          {question}
    """)`, Options{})
	if err != nil || got != `"\nSolve:\n  {question}\n"` {
		t.Errorf("dedent in Starlark = %s, %v", got, err)
	}
}

func TestBoundedBuiltins(t *testing.T) {
	tests := []struct {
		expr string
		opts Options
		want string // result repr, or error substring when err
		err  bool
	}{
		{`len(range(1000))`, Options{}, "1000", false},
		{`list(range(2000))`, Options{MaxRange: 1000}, "more than the limit of 1000", true},
		{`range(0, 1000000000000, 1)`, Options{}, "more than the limit", true},
		{`len(range(0, 1000000000000, 1000000000))`, Options{}, "1000", false},
		{`json.encode({"a": [1, 2]})`, Options{}, `"{\"a\":[1,2]}"`, false},
		{`json.decode('{"a": [1, 2.5, null]}')`, Options{}, `{"a": [1, 2.5, None]}`, false},
		{`json.encode(["x" * 100])`, Options{MaxStringBytes: 50}, "json.encode: result of 104 bytes is more than the limit of 50", true},
		{`json.indent('{"a":1}')`, Options{}, `"{\n\t\"a\": 1\n}"`, false},
		{`math.sqrt(16)`, Options{}, "4.0", false},
		{`math.floor(2.7)`, Options{}, "2", false},
		{`sorted(set([3, 1, 2]))`, Options{}, "[1, 2, 3]", false},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := evalExpr(t, tt.expr, tt.opts)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("= %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestPrintIsCaptured(t *testing.T) {
	var rec CallRecord
	h := mustLoad(t, "print('loading')\ndef should_stop(state):\n    for i in range(2000):\n        print('line', i)\n", Options{Recorder: func(r CallRecord) { rec = r }})
	if _, err := h.Call(bg, "should_stop", state()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Output, "line 0\nline 1\n") || len(rec.Output) > maxPrintBytes+64 {
		t.Errorf("output %d bytes starting %q", len(rec.Output), rec.Output[:min(20, len(rec.Output))])
	}
}

func TestCutChars(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
		cut  bool
	}{
		{"abc", 5, "abc", false},
		{"abc", 3, "abc", false},
		{"abc", 2, "ab", true},
		{"é中🐳x", 3, "é中🐳", true},
		{"é中", 2, "é中", false},
		{"abc", 0, "", true},
		{"", 0, "", false},
	} {
		if got, cut := CutChars(tc.s, tc.n); got != tc.want || cut != tc.cut {
			t.Errorf("CutChars(%q, %d) = %q, %v; want %q, %v", tc.s, tc.n, got, cut, tc.want, tc.cut)
		}
	}
}
