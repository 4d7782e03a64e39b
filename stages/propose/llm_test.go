package propose

import (
	"strings"
	"testing"
)

func TestParseReply(t *testing.T) {
	cases := []struct {
		name  string
		text  string
		m     int
		want  []proposal // Source compared trimmed
		extra int
	}{
		{"plain", "name: a\naxis: turns\nhypothesis: h\n```python\nX = 1\n```\n", 3,
			[]proposal{{Name: "a", Axis: "turns", Hypothesis: "h", Source: []byte("X = 1\n")}}, 0},
		{"markdown headers", "### 1\n**Name:** `more-turns`\n- **Axis**: turns\n* Hypothesis: more turns help.\n\n```starlark\nMAX_TURNS = 6\n```", 3,
			[]proposal{{Name: "more-turns", Axis: "turns", Hypothesis: "more turns help.", Source: []byte("MAX_TURNS = 6\n")}}, 0},
		{"no header", "```\nA = 1\n```\ntext\n```py\nB = 2\n```\n", 3,
			[]proposal{{Source: []byte("A = 1\n")}, {Source: []byte("B = 2\n")}}, 0},
		{"other languages skipped", "```json\n{}\n```\nname: x\n```python\nC = 3\n```", 3,
			[]proposal{{Name: "x", Source: []byte("C = 3\n")}}, 0},
		{"headers do not leak to the next block", "name: a\n```python\nA = 1\n```\n```python\nB = 2\n```", 3,
			[]proposal{{Name: "a", Source: []byte("A = 1\n")}, {Source: []byte("B = 2\n")}}, 0},
		{"unclosed last block", "name: cut\n```python\nX = 1\ndef f(", 3,
			[]proposal{{Name: "cut", Source: []byte("X = 1\ndef f(\n")}}, 0},
		{"longer fence holds a shorter one", "````python\nS = \"\"\"\n```\n\"\"\"\n````", 3,
			[]proposal{{Source: []byte("S = \"\"\"\n```\n\"\"\"\n")}}, 0},
		{"empty block is no code", "```python\n\n```", 3, nil, 0},
		{"over m", "```\nA = 1\n```\n```\nB = 2\n```\n```\nC = 3\n```", 2,
			[]proposal{{Source: []byte("A = 1\n")}, {Source: []byte("B = 2\n")}}, 1},
		{"no code", "I cannot do that.", 3, nil, 0},
		{"crlf", "name: w\r\n```python\r\nX = 1\r\n```\r\n", 3, []proposal{{Name: "w", Source: []byte("X = 1\n")}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, extra := parseReply(c.text, c.m)
			if len(got) != len(c.want) || len(extra) != c.extra {
				t.Fatalf("got %d proposals and %d extra, want %d and %d: %+v", len(got), len(extra), len(c.want), c.extra, got)
			}
			for i, w := range c.want {
				g := got[i]
				if g.Name != w.Name || g.Axis != w.Axis || g.Hypothesis != w.Hypothesis || string(g.Source) != string(w.Source) {
					t.Errorf("proposal %d = %+v (source %q), want %+v (source %q)", i, g, g.Source, w, w.Source)
				}
			}
		})
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"", "```", "name: a\n```python\nX=1\n```", "````\n```\n", "axis:\n~~~\nA\n~~~", "```python\n" + strings.Repeat("x\n", 10)} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, text string, m int) {
		if m < 1 || m > MaxCandidates {
			return
		}
		got, extra := parseReply(text, m)
		if len(got) > m {
			t.Fatalf("%d proposals for m = %d", len(got), m)
		}
		if len(extra) > 0 && len(got) != m {
			t.Fatalf("extra blocks with only %d proposals", len(got))
		}
		for _, p := range append(got, extra...) {
			if strings.TrimSpace(string(p.Source)) == "" {
				t.Fatal("an empty block became a proposal")
			}
			if !strings.Contains(text, strings.TrimSpace(string(p.Source))) && !strings.Contains(text, "\r") {
				t.Fatalf("source %q is not in the reply", p.Source)
			}
		}
	})
}

func TestSanitizeAndAxis(t *testing.T) {
	taken := map[string]bool{}
	for _, c := range []struct{ in, want string }{
		{"More Turns!", "more-turns"}, {"more_turns", "more-turns-2"}, {"", "candidate-3"}, {"../../etc", "etc"},
		{strings.Repeat("ab", 40), strings.Repeat("ab", 24)},
	} {
		if got := uniqueName(c.in, 2, taken); got != c.want {
			t.Errorf("uniqueName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for in, want := range map[string]string{"Tool_Format": "tool-format", " `prompt` ": "prompt", "": "unspecified", "context management": "context-management"} {
		if got := normalizeAxis(in); got != want {
			t.Errorf("normalizeAxis(%q) = %q, want %q", in, got, want)
		}
	}
}
