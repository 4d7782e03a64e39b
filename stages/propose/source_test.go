package propose

import (
	"errors"
	"strings"
	"testing"
)

const lastLine = "\n# Set last: this value overrides the one computed above.\n"

func TestSetConstant(t *testing.T) {
	cases := []struct {
		name, src, constant, literal string
		want                         string
		err                          error
	}{
		{"replace int keeps comment", "# head\nMAX_TURNS = 4  # budget\nX = 1\n", "MAX_TURNS", "6",
			"# head\nMAX_TURNS = 6  # budget\nX = 1\n", nil},
		{"replace call expression", "SYSTEM_PROMPT = (\"a\" +\n    \"b\")\ndef f():\n    pass\n", "SYSTEM_PROMPT", `"c"`,
			"SYSTEM_PROMPT = \"c\"\ndef f():\n    pass\n", nil},
		{"replace triple-quoted", "A = 1\nP = \"\"\"x\ny\"\"\"\nB = 2\n", "P", `"z"`, "A = 1\nP = \"z\"\nB = 2\n", nil},
		{"unicode before the value", "S = \"é\" ; T = 1\n", "T", "2", "S = \"é\" ; T = 2\n", nil},
		{"insert after leading comments", "# comment\n\nX = 1\n", "TOPK", "5", "# comment\n\nTOPK = 5\n\nX = 1\n", nil},
		{"insert into empty file", "", "TOPK", "5", "TOPK = 5\n", nil},
		{"insert into comments only", "# only", "TOPK", "5", "# only\nTOPK = 5\n", nil},
		{"value at end of file without newline", "MAX_TURNS = 4", "MAX_TURNS", "12", "MAX_TURNS = 12", nil},
		{"assigned twice", "MAX_TURNS = 4\nMAX_TURNS = 5\n", "MAX_TURNS", "6", "MAX_TURNS = 4\nMAX_TURNS = 5\n" + lastLine + "MAX_TURNS = 6\n", nil},
		{"augmented", "MAX_TURNS = 4\nMAX_TURNS += 1", "MAX_TURNS", "6", "MAX_TURNS = 4\nMAX_TURNS += 1\n" + lastLine + "MAX_TURNS = 6\n", nil},
		{"conditional", "if True:\n    MAX_TURNS = 4\n", "MAX_TURNS", "6", "if True:\n    MAX_TURNS = 4\n" + lastLine + "MAX_TURNS = 6\n", nil},
		{"tuple", "MAX_TURNS, X = 4, 5\n", "MAX_TURNS", "6", "MAX_TURNS, X = 4, 5\n" + lastLine + "MAX_TURNS = 6\n", nil},
		{"local of a def is fine", "MAX_TURNS = 4\ndef f():\n    MAX_TURNS = 9\n    return MAX_TURNS\n", "MAX_TURNS", "6",
			"MAX_TURNS = 6\ndef f():\n    MAX_TURNS = 9\n    return MAX_TURNS\n", nil},
		{"carriage returns", "MAX_TURNS = 4\r\n", "MAX_TURNS", "6", "", errNotRewritable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := setConstant("h.star", []byte(c.src), c.constant, c.literal)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "two\nlines", `quotes " and """ and \ backslash`, "tab\tand\nbell\a", "ends with quote\n\"", "é\n✓", "{question}\n\nThink."} {
		q := quote(s)
		got, ok := literalValue(q)
		if !ok || got != s {
			t.Errorf("quote(%q) = %s reads back as %q", s, q, got)
		}
	}
	if q := quote("a\nb"); !strings.HasPrefix(q, `"""`) {
		t.Errorf("multi-line strings should be triple-quoted, got %s", q)
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "a\nb", `"""`, "\\\n\"", "\x00\n\x7f", "\xff\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := quote(s)
		got, ok := literalValue(q)
		if !ok {
			// Invalid UTF-8 has no string literal; syntax.Quote then
			// writes \x escapes Starlark reads only in bytes.
			if strings.ToValidUTF8(s, "") == s {
				t.Fatalf("quote(%q) = %s does not parse", s, q)
			}
			return
		}
		if got != s {
			t.Fatalf("quote(%q) = %s reads back as %q", s, q, got)
		}
	})
}

func TestPromptOnlyDiff(t *testing.T) {
	parent := "# parent\nSYSTEM_PROMPT = \"a\"\nUSER_PROMPT = \"{question}\"\nMAX_TURNS = 4\n\ndef parse_action(text, state):\n    \"\"\"Doc.\"\"\"\n    return {\"kind\": \"answer\", \"answer\": text}\n"
	cases := []struct {
		name, candidate string
		want            string // "" or a substring of the diff
	}{
		{"new system prompt", strings.Replace(parent, `SYSTEM_PROMPT = "a"`, `SYSTEM_PROMPT = dedent("""b""").strip()`, 1), ""},
		{"prompts moved and comments changed", "USER_PROMPT = 'Q: {question}'\n# another comment\nMAX_TURNS = (4)\ndef parse_action(text, state):\n    \"\"\"Doc.\"\"\"\n    return {'kind': 'answer',\n            'answer': text}  # same\nSYSTEM_PROMPT = 'x'\n", ""},
		{"prompt removed", strings.Replace(parent, "SYSTEM_PROMPT = \"a\"\n", "", 1), ""},
		{"max turns", strings.Replace(parent, "MAX_TURNS = 4", "MAX_TURNS = 5", 1), "h.star:4"},
		{"docstring", strings.Replace(parent, "Doc.", "Other.", 1), "changes code"},
		{"added def", parent + "def should_stop(state):\n    return False\n", "adds code"},
		{"removed constant", strings.Replace(parent, "MAX_TURNS = 4\n", "", 1), "changes code"},
		{"augmented prompt counts as prompt", parent + "SYSTEM_PROMPT += \" more\"\n", ""},
		{"conditional prompt is code", parent + "if True:\n    SYSTEM_PROMPT = \"c\"\n", "adds code"},
	}
	p, err := parse("parent.star", []byte(parent))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parse("h.star", []byte(c.candidate))
			if err != nil {
				t.Fatal(err)
			}
			got := promptOnlyDiff(p, f)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("diff = %q, want %q", got, c.want)
			}
		})
	}
}

func TestCanonicalIgnoresLayoutOnly(t *testing.T) {
	a := "X = 1\ndef f(a, b=2):\n    return [a + b for a in range(3) if a]\n"
	same := "# c\nX = (1)   # one\n\ndef f(a,\n      b = 2):\n    # body\n    return [ a+b for a in range(3) if a ]\n"
	other := "X = 1\ndef f(a, b=3):\n    return [a + b for a in range(3) if a]\n"
	pa, _ := parse("a", []byte(a))
	ps, _ := parse("s", []byte(same))
	po, _ := parse("o", []byte(other))
	if canonicalDigest(pa) != canonicalDigest(ps) {
		t.Errorf("layout and comments changed the canonical form:\n%s\n%s", canonical(pa, nil), canonical(ps, nil))
	}
	if canonicalDigest(pa) == canonicalDigest(po) {
		t.Error("a changed default value left the canonical form unchanged")
	}
}
