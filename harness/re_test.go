package harness

import (
	"strings"
	"testing"
)

func TestRE(t *testing.T) {
	tests := []struct {
		expr string
		want string // Starlark repr of the result
	}{
		// search, match, fullmatch
		{`re.search(r"(\d+)-(\d+)", "a 12-34 b").group(0, 1, 2)`, `("12-34", "12", "34")`},
		{`re.search(r"(\d+)-(\d+)", "a 12-34 b").group()`, `"12-34"`},
		{`re.search(r"b", "ab").span()`, `(1, 2)`},
		{`re.search(r"z", "ab")`, `None`},
		{`re.match(r"b", "ab")`, `None`},
		{`re.match(r"a|ab", "abc").group()`, `"a"`},
		{`re.fullmatch(r"a|ab", "ab").group()`, `"ab"`},
		{`re.fullmatch(r"a", "ab")`, `None`},
		{`re.search(r"é(.)", "café!").group(1)`, `"!"`},
		{`re.search(r"é", "café").start()`, `3`}, // byte offsets
		{`re.search(r"(?P<k>\w+)=(?P<v>\w+)", "x=1").groupdict()`, `{"k": "x", "v": "1"}`},
		{`re.search(r"(?P<k>\w+)=(?P<v>\w+)", "x=1")["v"]`, `"1"`},
		{`re.search(r"(?P<k>\w+)=(?P<v>\w+)", "x=1")[1]`, `"x"`},
		{`re.search(r"(a)|(b)", "b").groups()`, `(None, "b")`},
		{`re.search(r"(a)|(b)", "b").groups("-")`, `("-", "b")`},
		{`re.search(r"(a)|(b)", "b").group(1)`, `None`},
		{`re.search(r"(a)|(b)", "b").start(1)`, `-1`},
		{`re.search(r"x", "axb").string`, `"axb"`},
		{`str(re.search(r"x+", "axxb"))`, `"<re.Match span=(1, 3) match=\"xx\">"`},
		// flags, positional or keyword, and inline
		{`re.search("ABC", "xabc", re.I).group()`, `"abc"`},
		{`re.search("ABC", "xabc", flags=re.IGNORECASE).group()`, `"abc"`},
		{`re.search("(?i)ABC", "xabc").group()`, `"abc"`},
		{`re.findall(r"^\w", "a\nb", re.M)`, `["a", "b"]`},
		{`re.findall(r"^\w", "a\nb")`, `["a"]`},
		{`re.search("a.b", "a\nb", flags=re.S) != None`, `True`},
		{`re.search("a.b", "a\nb")`, `None`},
		// findall: whole match, one group, several groups
		{`re.findall(r"\d+", "a1b22c333")`, `["1", "22", "333"]`},
		{`re.findall(r"(\w)=\d", "a=1 b=2")`, `["a", "b"]`},
		{`re.findall(r"(\w)=(\d)", "a=1 b=2")`, `[("a", "1"), ("b", "2")]`},
		{`re.findall(r"x(y)?", "x xy")`, `["", "y"]`},
		{`[m.group(1) for m in re.finditer(r"<(\w+)>", "<a><bb>")]`, `["a", "bb"]`},
		// sub
		{`re.sub(r"(\w+)@(\w+)", r"\2 at \1", "me@host")`, `"host at me"`},
		{`re.sub(r"(?P<n>\d)", r"<\g<n>>", "a1b2")`, `"a<1>b<2>"`},
		{`re.sub(r"\d", r"[\g<0>]", "a1")`, `"a[1]"`},
		{`re.sub(r"\d", lambda m: str(int(m.group()) * 2), "a1b4")`, `"a2b8"`},
		{`re.sub("a", "b", "aaa", count=2)`, `"bba"`},
		{`re.sub(r"\s+", "", " a b ")`, `"ab"`},
		{`re.compile("x").sub("", "axbx")`, `"ab"`},
		{`re.sub("a", "b", "aaa", 1)`, `"baa"`},
		{`re.sub("A", "b", "aA", 0, re.I)`, `"bb"`},
		{`re.sub(r"\s+", r"\n", "a  b")`, `"a\nb"`},
		{`re.sub(r"x", r"\\", "axb")`, `"a\\b"`},
		{`re.sub(r"x", r"$1\&", "axb")`, `"a$1\\&b"`},
		{`re.sub(r"(a)|b", r"[\1]", "ab")`, `"[a][]"`},
		// split
		{`re.split(r"[,;]\s*", "a, b;c")`, `["a", "b", "c"]`},
		{`re.split(r"(,)", "a,b")`, `["a", ",", "b"]`},
		{`re.split(r"(,)|(;)", "a,b")`, `["a", ",", None, "b"]`},
		{`re.split(",", "a,b,c", maxsplit=1)`, `["a", "b,c"]`},
		{`re.split(",", "a,b,c", 1)`, `["a", "b,c"]`},
		{`re.split(",", "")`, `[""]`},
		// escape and compile
		{`re.escape("a.b*c")`, `"a\\.b\\*c"`},
		{`re.search(re.escape("1+1=2?"), "is 1+1=2?") != None`, `True`},
		{`re.compile(r"(\d+)").findall("1 22")`, `["1", "22"]`},
		{`re.compile(r"b").match("ab")`, `None`},
		{`re.compile(r"a", re.I).sub("x", "AaB")`, `"xxB"`},
		{`re.compile(r"(a)(b)").groups`, `2`},
		{`re.compile(r"a+").pattern`, `"a+"`},
		{`re.search(re.compile("b"), "ab").span()`, `(1, 2)`},
		{`re.compile(r"(\d)").split("a1b")`, `["a", "1", "b"]`},
		// patterns are shared; one-argument group and search's fast paths
		{`re.compile(r"x+") == re.compile(r"x+")`, `True`},
		{`re.compile(r"x+") == re.compile(r"x+", re.I)`, `False`},
		{`re.search(r"(?P<n>\d+)", "ab 42").group("n")`, `"42"`},
		{`re.search(r"(\d)", "a1").group(1, 1)`, `("1", "1")`},
		{`re.compile(r"\d").search(string="a1").group()`, `"1"`},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := evalExpr(t, tt.expr, Options{})
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if got != tt.want {
				t.Errorf("= %s, want %s", got, tt.want)
			}
		})
	}
}

func TestREErrors(t *testing.T) {
	tests := []struct {
		expr string
		opts Options
		want []string
	}{
		{`re.search(r"(a)\1", "aa")`, Options{}, []string{"re.search: bad pattern", `\1`, "RE2", "no backreferences"}},
		{`re.search(r"a(?=b)", "ab")`, Options{}, []string{"bad pattern", "lookahead"}},
		{`re.match(r"(?<=a)b", "ab")`, Options{}, []string{"re.match: bad pattern", "RE2"}},
		{`re.compile(r"(")`, Options{}, []string{"re.compile: bad pattern", "missing closing )"}},
		{`re.search("a", "a", flags=64)`, Options{}, []string{"unsupported flags 64"}},
		{`re.sub("a", r"\q", "a")`, Options{}, []string{"bad escape \\q"}},
		{`re.sub("a", r"\2", "a")`, Options{}, []string{"invalid group reference \\2"}},
		{`re.sub("a", r"\g<nope>", "a")`, Options{}, []string{"unknown group name"}},
		{`re.sub("a", lambda m: 1, "a")`, Options{}, []string{"repl function returned int"}},
		{`re.search(r"(a)", "a").group(2)`, Options{}, []string{"no such group"}},
		{`re.search(r"(a)", "a")["x"]`, Options{}, []string{"no such group"}},
		{`re.search(1, "a")`, Options{}, []string{"pattern must be a string"}},
		{`re.search("a", 1)`, Options{}, []string{"re.search", "string"}},
		{`re.compile("a").search("a", "b")`, Options{}, []string{"re.Pattern.search", "want at most 1"}},
		{`re.findall("a", "a" * 20)`, Options{MaxValueItems: 10}, []string{"more than 10 matches"}},
		{`re.sub("a", "bbbb", "a" * 100)`, Options{MaxStringBytes: 100}, []string{"more than the limit of 100 bytes"}},
		{`re.split("a", "a" * 20)`, Options{MaxValueItems: 10}, []string{"more than 10 matches"}},
		{`re.search("a" * 70000, "a")`, Options{}, []string{"more than the limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := evalExpr(t, tt.expr, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			wantContains(t, "error", err.Error(), tt.want...)
		})
	}
}

// Patterns that backtrack catastrophically in Python run in linear time.
func TestRELinearTime(t *testing.T) {
	expr := `re.search(r"(a+)+$", "` + strings.Repeat("a", 50000) + `b")`
	got, err := evalExpr(t, expr, Options{})
	if err != nil || got != "None" {
		t.Errorf("= %s, %v", got, err)
	}
}
