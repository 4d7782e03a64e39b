package harness

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.starlark.net/resolve"
	"go.starlark.net/syntax"
)

func TestLoadSyntaxErrorPosition(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		line, col int
		msg       string
	}{
		{"unterminated string", "X = 1\nSYSTEM_PROMPT = 'abc\n", 2, 17, "unexpected newline in string"},
		{"unexpected indent", "x = 1\n  y = 2\n", 2, 3, "got indent"},
		{"python import", "x = 1\nimport os\n", 2, 1, "no import statement"},
		{"missing paren at eof", "x = 1\ny = (1,\n", 3, 1, "end of file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le := loadErr(t, tt.src, Options{})
			var se syntax.Error
			if !errors.As(le, &se) {
				t.Fatalf("error does not unwrap to syntax.Error: %v", le)
			}
			if int(se.Pos.Line) != tt.line || int(se.Pos.Col) != tt.col {
				t.Errorf("syntax.Error at %d:%d, want %d:%d", se.Pos.Line, se.Pos.Col, tt.line, tt.col)
			}
			p := le.Problems[0].Pos
			if p.File != "h.star" || p.Line != tt.line || p.Col != tt.col {
				t.Errorf("problem at %v, want h.star:%d:%d", p, tt.line, tt.col)
			}
			wantContains(t, "error", le.Error(), tt.msg, p.String())
			if !errors.Is(le, ErrInvalid) {
				t.Error("error does not match ErrInvalid")
			}
		})
	}
}

func TestLoadRuntimeErrorAtTopLevel(t *testing.T) {
	src := "def f(x):\n    return x[1]\n\nY = f([1])\n"
	le := loadErr(t, src, Options{})
	if !errors.Is(le, ErrRuntime) {
		t.Errorf("error %v does not match ErrRuntime", le)
	}
	if got := le.Problems[0].Pos; got.Line != 2 || got.Col != 13 {
		t.Errorf("position %v, want h.star:2:13 (inside f)", got)
	}
	wantContains(t, "backtrace", le.Backtrace, "h.star:4:6: in <toplevel>", "h.star:2:13: in f", "index 1 out of range")
}

func TestSandboxForbidsOutsideAccess(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		want []string
	}{
		{"load", "X = 1\nload('x.star', 'y')\n", 2, []string{"load(", "not allowed"}},
		{"open", "def f():\n    return open('/etc/passwd')\n", 2, []string{"undefined: open", "files"}},
		{"__import__", "OS = __import__('os')\n", 1, []string{"undefined: __import__"}},
		{"exec", "exec('x = 1')\n", 1, []string{"undefined: exec"}},
		{"eval", "X = eval('1')\n", 1, []string{"undefined: eval"}},
		{"time", "T = time.now()\n", 1, []string{"undefined: time", "no clock"}},
		{"os", "E = os.environ\n", 1, []string{"undefined: os"}},
		{"random", "R = random.random()\n", 1, []string{"undefined: random"}},
		{"recursion", "def f(n):\n    return f(n - 1) if n else 0\nX = f(3)\n", 2, []string{"called recursively"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le := loadErr(t, tt.src, Options{})
			if got := le.Problems[0].Pos.Line; got != tt.line {
				t.Errorf("line %d, want %d (%v)", got, tt.line, le)
			}
			wantContains(t, "error", le.Error(), tt.want...)
		})
	}
	// Resolution errors are all reported, each with its own position.
	le := loadErr(t, "A = open('x')\nB = 1\nC = exec('y')\n", Options{})
	if len(le.Problems) != 2 || le.Problems[0].Pos.Line != 1 || le.Problems[1].Pos.Line != 3 {
		t.Errorf("problems %v, want one on line 1 and one on line 3", le.Problems)
	}
	var rl resolve.ErrorList
	if !errors.As(le, &rl) {
		t.Error("error does not unwrap to resolve.ErrorList")
	}
}

func TestLoadStepLimitAndDeadline(t *testing.T) {
	le := loadErr(t, "X = 0\nwhile True:\n    X += 1\n", Options{LoadSteps: 50_000})
	if !errors.Is(le, ErrStepLimit) {
		t.Errorf("endless top level: %v, want ErrStepLimit", le)
	}
	if le.Problems[0].Pos.Line < 2 {
		t.Errorf("position %v, want inside the loop", le.Problems[0].Pos)
	}
	le = loadErr(t, "X = 0\nwhile True:\n    X += 1\n", Options{LoadTimeout: 30_000_000}) // 30ms
	if !errors.Is(le, ErrDeadline) {
		t.Errorf("slow top level: %v, want ErrDeadline", le)
	}
}

func TestSourceTooLarge(t *testing.T) {
	src := "X = 1\n" + strings.Repeat("# padding\n", MaxSourceBytes/10+1)
	le := loadErr(t, src, Options{})
	wantContains(t, "error", le.Error(), "more than the limit")
}

func TestConstantsChecked(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		want string
	}{
		{"int as string", "\nMAX_TURNS = '3'\n", 2, "want an int"},
		{"int below min", "MAX_TURNS = 0\n", 1, "below the minimum 1"},
		{"int above max", "MAX_TURNS = 65\n", 1, "above the maximum 64"},
		{"float for int", "MAX_TOKENS = 100.0\n", 1, "want an int"},
		{"string as int", "SYSTEM_PROMPT = 3\n", 1, "want a string"},
		{"constant as function", "def MAX_TURNS():\n    return 3\n", 1, "not a function"},
		{"template unknown field", "X = 1\n\nUSER_PROMPT = 'Solve {problem}'\n", 3, "template does not render"},
		{"template bare braces", "USER_PROMPT = 'Put it in \\\\boxed{} {question}'\n", 1, "{{ and }}"},
		{"template format spec", "USER_PROMPT = '{question:>10}'\n", 1, "template does not render"},
		{"reassigned: last binding reported", "MAX_TURNS = 3\nMAX_TURNS = -1\n", 2, "below the minimum"},
		{"list element shape", "STOP_WORDS = ['a', 1]\n", 1, "STOP_WORDS[1]: want string"},
		{"dict with int key", "ALIASES = {1: 'x'}\n", 1, "dict key 1"},
		{"bool as int", "VERBOSE = 1\n", 1, "want a bool"},
		{"float as string", "TEMPERATURE_HINT = 'hot'\n", 1, "want a float"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le := loadErr(t, tt.src, Options{Contract: testContract()})
			if len(le.Problems) != 1 {
				t.Fatalf("problems %v, want 1", le.Problems)
			}
			if got := le.Problems[0].Pos; got.File != "h.star" || got.Line != tt.line {
				t.Errorf("position %v, want h.star:%d", got, tt.line)
			}
			wantContains(t, "error", le.Error(), tt.want)
		})
	}

	// Several problems are reported together.
	le := loadErr(t, "MAX_TURNS = 0\nTOPK = 'x'\ndef parse_action(text):\n    pass\n", Options{Contract: testContract()})
	if len(le.Problems) != 3 {
		t.Errorf("problems %v, want 3", le.Problems)
	}
}

func TestConstantValues(t *testing.T) {
	src := `
MAX_TURNS = 7
TEMPERATURE_HINT = 2          # an int where a float is declared
PROMPT_PARTS = ["Be ", "brief."]
SYSTEM_PROMPT = ""
for p in PROMPT_PARTS:
    SYSTEM_PROMPT += p
USER_PROMPT = "{question} (board {fen}) \\boxed{{}}"
STOP_WORDS = ["x"]
`
	h := mustLoad(t, src, Options{Contract: testContract()})
	if got := h.Int("MAX_TURNS"); got != 7 {
		t.Errorf("MAX_TURNS = %d, want 7", got)
	}
	if got := h.Int("TOPK"); got != 3 {
		t.Errorf("TOPK = %d, want the default 3", got)
	}
	if got := h.Float("TEMPERATURE_HINT"); got != 2.0 {
		t.Errorf("TEMPERATURE_HINT = %v, want 2.0", got)
	}
	if got := h.String("SYSTEM_PROMPT"); got != "Be brief." {
		t.Errorf("SYSTEM_PROMPT = %q", got)
	}
	if got := h.Bool("VERBOSE"); got {
		t.Error("VERBOSE = true, want the default false")
	}
	if got := h.List("STOP_WORDS"); len(got) != 1 || got[0] != "x" {
		t.Errorf("STOP_WORDS = %v", got)
	}
	if got := h.Dict("ALIASES"); got["nyc"] != "New York" {
		t.Errorf("ALIASES = %v", got)
	}
	got, err := h.Render("USER_PROMPT", map[string]any{"question": "Mate in 1?", "fen": "8/8", "unused": 1})
	if err != nil || got != "Mate in 1? (board 8/8) \\boxed{}" {
		t.Errorf("Render = %q, %v", got, err)
	}
	if !h.Defines("MAX_TURNS") || h.Defines("TOPK") {
		t.Error("Defines does not tell the harness's constants from defaults")
	}
	if p := h.Position("MAX_TURNS"); p.Line != 2 {
		t.Errorf("Position(MAX_TURNS) = %v, want line 2", p)
	}
	if c := h.Constants(); c["MAX_TURNS"] != int64(7) || c["TOPK"] != int64(3) {
		t.Errorf("Constants() = %v", c)
	}
	defer func() {
		if recover() == nil {
			t.Error("Int of an undeclared constant did not panic")
		}
	}()
	h.Int("NOPE")
}

func TestHookArity(t *testing.T) {
	tests := []struct {
		name string
		src  string
		ok   bool
		line int
		want string
	}{
		{"exact", "def parse_action(text, state):\n    pass\n", true, 0, ""},
		{"extra optional", "def parse_action(text, state, strict=False):\n    pass\n", true, 0, ""},
		{"varargs", "def parse_action(*args):\n    pass\n", true, 0, ""},
		{"optional kwonly", "def parse_action(text, state, *, k=1):\n    pass\n", true, 0, ""},
		{"lambda", "parse_action = lambda text, state: {'kind': 'invalid'}\n", true, 0, ""},
		{"too few", "\n\ndef parse_action(text):\n    pass\n", false, 3, "takes 1 parameter (text); the loop calls it with 2 parameters (text, state)"},
		{"too many", "def parse_action(text, state, extra):\n    pass\n", false, 1, "takes 3 parameters"},
		{"required kwonly", "def parse_action(text, state, *, k):\n    pass\n", false, 1, "keyword-only"},
		{"not a function", "X = 1\nparse_action = 3\n", false, 2, "must be a function parse_action(text, state), got a int"},
		{"builtin", "parse_action = len\n", false, 1, "must be a function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("h.star", []byte(tt.src), Options{})
			if tt.ok {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			le := loadErr(t, tt.src, Options{})
			if got := le.Problems[0].Pos.Line; got != tt.line {
				t.Errorf("line %d, want %d", got, tt.line)
			}
			wantContains(t, "error", le.Error(), tt.want)
		})
	}
}

func TestWarnings(t *testing.T) {
	src := `
MAX_TURN = 3
def parse_actions(text, state):
    pass
FOO_BAR = 1
_PRIVATE = 2
lower = 3
def helper(x):
    return x
def truncate(s):
    return s
`
	h := mustLoad(t, src, Options{})
	warns := h.Warnings()
	var got []string
	for _, w := range warns {
		got = append(got, w.String())
	}
	joined := strings.Join(got, "\n")
	wantContains(t, "warnings", joined,
		"h.star:2:1: MAX_TURN is not part of contract base; did you mean MAX_TURNS?",
		"h.star:3:5: parse_actions is not part of contract base; did you mean parse_action?",
		"h.star:5:1: FOO_BAR looks like a constant",
		"h.star:10:5: truncate shadows the builtin")
	for _, quiet := range []string{"_PRIVATE", "lower", "helper"} {
		if strings.Contains(joined, quiet) {
			t.Errorf("warnings mention %s: %s", quiet, joined)
		}
	}
	if len(warns) != 4 {
		t.Errorf("%d warnings, want 4:\n%s", len(warns), joined)
	}
	cw, err := Check("h.star", []byte(src), Options{})
	if err != nil || len(cw) != len(warns) {
		t.Errorf("Check = %v, %v; want the same warnings", cw, err)
	}
}

func TestHarnessID(t *testing.T) {
	a := []byte("MAX_TURNS = 3\n")
	b := []byte("MAX_TURNS = 4\n")
	if SourceID(a) == SourceID(b) {
		t.Error("different sources have the same ID")
	}
	if SourceID(a) != SourceID(append([]byte(nil), a...)) {
		t.Error("ID is not a function of the bytes")
	}
	id := SourceID(a)
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+64 {
		t.Errorf("ID %q, want sha256:<64 hex>", id)
	}
	// sha256("") is well known.
	if got := SourceID(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("SourceID(empty) = %s", got)
	}
	h := mustLoad(t, string(a), Options{})
	if h.ID() != id || string(h.Source()) != string(a) || h.Filename() != "h.star" {
		t.Errorf("harness ID/Source/Filename = %s/%q/%s", h.ID(), h.Source(), h.Filename())
	}
}

func TestContractValidate(t *testing.T) {
	bad := []Contract{
		{Constants: []ConstSpec{{Name: "X", Type: TypeInt, Default: "3"}}},
		{Constants: []ConstSpec{{Name: "X", Type: TypeInt, Default: 0, Min: Bound(1)}}},
		{Constants: []ConstSpec{{Name: "re", Type: TypeInt, Default: 0}}},
		{Constants: []ConstSpec{{Name: "P", Type: TypeTemplate, Default: "{nope}"}}},
		{Helpers: map[string]Builtin{"len": {Fn: func(_ context.Context, _ []any) (any, error) { return nil, nil }}}},
		{Helpers: map[string]Builtin{"h": {}}},
		{Hooks: []HookSpec{{Name: "h", Params: []string{"x"}}}},
		{Constants: []ConstSpec{{Name: "parse_action", Type: TypeInt, Default: 1}}},
		{Constants: []ConstSpec{{Name: "bad name", Type: TypeInt, Default: 1}}},
	}
	for i, c := range bad {
		if err := Base().Extend(c).Validate(); err == nil {
			t.Errorf("contract %d: Validate accepted %+v", i, c)
		}
		if _, err := Load("h.star", nil, Options{Contract: Base().Extend(c)}); err == nil {
			t.Errorf("contract %d: Load accepted a bad contract", i)
		}
	}
	if err := testContract().Validate(); err != nil {
		t.Errorf("test contract: %v", err)
	}
	// Extend replaces by name and keeps order.
	c := Base().Extend(Contract{Constants: []ConstSpec{{Name: "MAX_TURNS", Type: TypeInt, Default: 9}}})
	if k, _ := c.Const("MAX_TURNS"); k.Default != 9 || c.Constants[2].Name != "MAX_TURNS" {
		t.Errorf("Extend did not replace MAX_TURNS in place: %+v", c.Constants)
	}
	if k, _ := Base().Const("MAX_TURNS"); k.Default == 9 {
		t.Error("Extend changed the base contract")
	}
}
