package harness

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The inputs that killed the process before harness code had memory
// limits: each is now a LoadError that names the limit, and the process
// (this test) survives.
func TestCrashInputsAreRejected(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"list repetition", "X = [0]*((1<<30)-1)\n",
			[]string{"h.star:1:8", "memory limit", "a list of 1073741823 elements", "at most 1048576 elements", "MaxAllocBytes"}},
		{"string repetition", "X = \"x\"*((1<<30)-1)\n",
			[]string{"h.star:1:8", "memory limit", "a string of 1073741823 bytes", "at most 16777216 bytes", "MaxAllocBytes"}},
		{"json nesting", "X = json.decode(\"[\" * 5000000 + \"]\" * 5000000)\n",
			[]string{"h.star:1:16", "json.decode", "nested deeper than 1000 levels", "MaxNesting"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			le := loadErr(t, tc.src, Options{})
			if !errors.Is(le, ErrMemory) || !errors.Is(le, ErrInvalid) {
				t.Errorf("error %v matches neither ErrMemory nor ErrInvalid", le)
			}
			wantContains(t, "error", le.Error(), tc.want...)
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

// Every operation that can make a value larger than its operands checks
// the size first, and the error names the operation's position and the
// limit.
func TestOperationsAreBounded(t *testing.T) {
	cases := []struct{ src, want string }{
		{"X = 'ab'\nfor i in range(40):\n    X += X\n", "h.star:3:7: top level: memory limit: += would make a string of 33554432 bytes"},
		{"X = 'ab'\nfor i in range(40):\n    X = X + X\n", "h.star:3:11: top level: memory limit: + would make a string of 33554432 bytes"},
		{"X = [1]\nfor i in range(40):\n    X += X\n", "+= would make a list of 2097152 elements"},
		{"X = [1]\nfor i in range(40):\n    X.extend(X)\n", "extend would make a list of 2097152 elements"},
		{"X = [1]\nfor i in range(40):\n    X = X * 2\n", "* would make a list of 2097152 elements"},
		{"X = (1,)\nfor i in range(40):\n    X = X + X\n", "+ would make a tuple of 2097152 elements"},
		{"X = [1] * 4\nX *= 1 << 20\n", "*= would make a list of 4194304 elements"},
		{"X = b'x' * (1 << 25)\n", "* would make a bytes of 33554432 bytes"},
		{"X = 2\nfor i in range(40):\n    X = X * X\n", "* would make an int of 65538 bits; one value may hold at most 65536 bits (MaxIntBits)"},
		{"X = 1 << 500\nfor i in range(400):\n    X = X << 500\n", "<< would make an int of"},
		{"X = ''.join(['x' * 1000000] * 20)\n", "join would make a string of more than 16777216 bytes"},
		{"X = ('%s' * 20) % tuple(['x' * 1000000] * 20)\n", "% would make a string of more than 16777216 bytes"},
		{"X = ('{0}' * 20).format('x' * 1000000)\n", "format would make a string of more than 16777216 bytes"},
		{"X = ('x' * 1000).replace('x', 'y' * 20000)\n", "replace would make a string of more than 16777216 bytes"},
		{"X = str(['x' * 1000000] * 20)\n", "str would make a string of more than 16777216 bytes"},
		{"X = repr(('x' * 1000000,) * 20)\n", "repr would make a string of more than 16777216 bytes"},
		{"X = json.encode(['x' * 1000000] * 20)\n", "json.encode would make a string of more than 16777216 bytes"},
		{"print(['x' * 1000000] * 20)\n", "print would make a string of more than 16777216 bytes"},
		{"fail(['x' * 1000000] * 20)\n", "fail would make a string of more than 16777216 bytes"},
		{"X = (' ' * 4000000).split()\n", "split would make a list of 4000001 elements"},
		{"X = ('a\\n' * 2000000).splitlines()\n", "split would make a list of 2000001 elements"},
		{"X = list(range(1000000)) + list(range(100000))\n", "+ would make a list of 1100000 elements"},
		{"X = {}\nX.update([(i, i) for i in range(300000)])\n", "update would make a dict of 300000 entries"},
		{"X = dict([(i, i) for i in range(300000)])\n", "dict() would make a dict of 300000 entries"},
		{"X = [1] * 1000000\nY = list(zip(X, X, X)) + [0] * 100000\n", "+ would make a list of 1100000 elements"},
		{"X = int('9' * 30000)\n", "int: a string of 30000 characters is more than the limit of 20000 digits"},
		{"X = json.decode('[' + '9' * 30000 + ']')\n", "json.decode: a number of more than 20000 digits"},
		{"X = json.indent('[' * 999 + ']' * 999, indent = ' ' * 100)\n", "json.indent would make a string of more than 16777216 bytes"},
		{"X = []\nfor i in range(10000):\n    X = [X]\nY = str(X)\n", "memory limit: a value nested deeper than 1000 levels (MaxNesting)"},
		{"X = []\nfor i in range(10000):\n    X = [X]\nY = json.encode(X)\n", "a value nested deeper than 1000 levels (MaxNesting)"},
		{"X = dedent('\\n' * 2000000)\n", "dedent would make a list of 2000001 elements"},
		{"X = {i: 'x' * (1 << 25) for i in range(1)}\n", "* would make a string of 33554432 bytes"},
		{"X = set([1])\nfor i in range(20):\n    X = X ^ set(range(len(X) + 1, 2 * len(X) + 1))\n", "^ would make a set of 524288 entries"},
	}
	for _, tc := range cases {
		t.Run(strings.SplitN(tc.src, "\n", 2)[0], func(t *testing.T) {
			start := time.Now()
			le := loadErr(t, tc.src, Options{})
			wantContains(t, "error", le.Error(), tc.want)
			if strings.Contains(le.Error(), "memory limit") && !errors.Is(le, ErrMemory) {
				t.Errorf("%v does not match ErrMemory", le)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

// Below the limits the same operations work, and strings, lists and
// dicts of a few MiB are no trouble.
func TestOperationsWithinLimits(t *testing.T) {
	src := `
S = "ab" * (4 << 20)
T = S + S
L = [0] * 1000000
M = L[:500000] + L[:500000]
D = {str(i): i for i in range(1000)}
J = json.decode(json.encode({"a": [[[[1]]]], "s": S[:1000]}))
N = json.decode("[" * 900 + "]" * 900)
P = ",".join(["x"] * 100000)
Q = P.split(",")
R = "%s" % (S[:100],) + "{}".format(D["7"])
I = int("9" * 1000) * 3
parts = []
for i in range(1000):
    parts.append("line %d" % i)
U = "\n".join(parts)
V = ""
for p in parts:
    V += p + "\n"
`
	h := mustLoad(t, src, Options{})
	if got := len(h.globals["T"].String()); got < 16<<20 {
		t.Errorf("T is %d bytes", got)
	}
}

// A call's allocations together are bounded by MaxMemoryBytes, garbage
// included; the error says how to build long strings instead.
func TestMemoryBudget(t *testing.T) {
	src := `
def should_stop(state):
    keep = []
    for i in range(1000):
        keep.append("y" * 100000)
    return False
`
	h := mustLoad(t, src, Options{MaxMemoryBytes: 32 << 20})
	_, err := h.Call(bg, "should_stop", state())
	he := hookErr(t, err)
	if !errors.Is(err, ErrMemory) {
		t.Errorf("error %v does not match ErrMemory", err)
	}
	wantContains(t, "error", he.Error(), "h.star:5:", "memory limit: this call allocated more than 33554432 bytes (MaxMemoryBytes)", `"".join(parts)`)
	// The budget is per call: the next call starts afresh.
	h = mustLoad(t, strings.Replace(src, "range(1000)", "range(100)", 1), Options{MaxMemoryBytes: 32 << 20})
	for range 3 {
		if _, err := h.Call(bg, "should_stop", state()); err != nil {
			t.Fatal(err)
		}
	}
}

// The defaults apply to callers that set no limits: the episode loop, the
// propose stage and whale harness pass a Contract and nothing else.
func TestDefaultLimitsApply(t *testing.T) {
	h := mustLoad(t, "def should_stop(state):\n    return len('x' * ((1 << 30) - 1)) > 0\n", Options{Contract: testContract()})
	if h.opts.MaxAllocBytes != DefaultMaxAllocBytes || h.opts.MaxMemoryBytes != DefaultMaxMemoryBytes || h.opts.MaxHeapBytes != DefaultMaxHeapBytes() {
		t.Errorf("options %+v", h.opts)
	}
	_, err := h.Call(bg, "should_stop", state())
	he := hookErr(t, err)
	if !errors.Is(err, ErrMemory) {
		t.Errorf("%v does not match ErrMemory", err)
	}
	wantContains(t, "error", he.Error(), "hook should_stop (h.star:2:20)", "a string of 1073741823 bytes", "MaxAllocBytes")
	if runtime.GOOS == "linux" {
		if n := DefaultMaxHeapBytes(); n == 0 || n >= memTotal() {
			t.Errorf("DefaultMaxHeapBytes() = %d, want 3/4 of at most %d", n, memTotal())
		}
	}
}

// re over a large string is refused at once when the work it may take
// passes the limit, and a loop of slow matches stops at the deadline,
// not a thousand steps later.
func TestRegexWorkAndDeadline(t *testing.T) {
	start := time.Now()
	le := loadErr(t, "S = 'a ' * (8 << 20)\nX = re.search(r'(\\w+\\s*){20}q', S)\n", Options{})
	wantContains(t, "error", le.Error(), "h.star:2:14", "re.search: matching a string of 16777216 bytes against a pattern of", "more work than the limit")
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("refusing took %v", el)
	}

	// Each search takes some 60 ms; without a look at the clock before
	// each, the loop would run ~170 of them (10 s) until the steps'
	// next poll.
	src := `
def should_stop(state):
    s = "a " * 20000
    n = 0
    while True:
        if re.search(r"(\w+\s*){20}q", s):
            n += 1
    return False
`
	h := mustLoad(t, src, Options{CallTimeout: 500 * time.Millisecond, MaxSteps: 1 << 40})
	start = time.Now()
	_, err := h.Call(bg, "should_stop", state())
	el := time.Since(start)
	if !errors.Is(err, ErrDeadline) {
		t.Errorf("error %v, want ErrDeadline", err)
	}
	if el > 3*time.Second {
		t.Errorf("the call took %v with a deadline of 500ms", el)
	}
}

// A missing dict key is shown in a few hundred bytes, not all of it.
func TestKeyErrorIsShort(t *testing.T) {
	le := loadErr(t, "D = {}\nX = D[('x' * 1000000,) * 100]\n", Options{})
	if len(le.Error()) > 500 {
		t.Errorf("error of %d bytes", len(le.Error()))
	}
	wantContains(t, "error", le.Error(), "key (a tuple of 100 elements, too large to show) not in dict")
	le = loadErr(t, "D = {}\nX = D['k' * 1000]\n", Options{})
	wantContains(t, "error", le.Error(), `key "kkkkk`, "(a string of 1000 bytes) not in dict")
}

// A template constant repeated a million times is not rendered a million
// times.
func TestRenderIsBounded(t *testing.T) {
	h := mustLoad(t, "USER_PROMPT = '{question}' * 100000\n", Options{Contract: testContract()})
	_, err := h.Render("USER_PROMPT", map[string]any{"question": strings.Repeat("q", 1000)})
	if !errors.Is(err, ErrMemory) {
		t.Errorf("Render: %v, want ErrMemory", err)
	}
}

// Hidden temporaries of the rewrite are not warned about.
func TestRewriteHasNoWarnings(t *testing.T) {
	h := mustLoad(t, "d = {'a': [1]}\nd['a'] += [2]\nl = [0]\nl[0] += 1\n", Options{})
	if w := h.Warnings(); len(w) != 0 {
		t.Errorf("warnings %v", w)
	}
	if got := fmt.Sprint(h.globals["d"]); got != `{"a": [1, 2]}` {
		t.Errorf("d = %s", got)
	}
}

// Tuples that share tuples would take forever to freeze; Load refuses
// them at once.
func TestFreezeIsBounded(t *testing.T) {
	start := time.Now()
	le := loadErr(t, "T = (1,)\nfor i in range(60):\n    T = (T, T)\n", Options{})
	if !errors.Is(le, ErrMemory) {
		t.Errorf("%v does not match ErrMemory", le)
	}
	wantContains(t, "error", le.Error(), "freezing them would visit more than")
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
	// A closure holding such a tuple too.
	le = loadErr(t, "def make():\n    t = (1,)\n    for i in range(60):\n        t = (t, t)\n    def g():\n        return t\n    return g\nG = make()\n", Options{})
	wantContains(t, "error", le.Error(), "freezing them would visit more than")
	// Large but ordinary values freeze.
	mustLoad(t, "L = [[i] * 10 for i in range(100000)]\nT = tuple(L)\nU = (T, T, T)\n", Options{})
}

// Operations on literals are left to the interpreter only when their
// result is small.
func TestLiteralRepetition(t *testing.T) {
	le := loadErr(t, "X = \""+strings.Repeat("x", 100000)+"\" * 4000\n", Options{})
	wantContains(t, "error", le.Error(), "* would make a string of 400000000 bytes")
	h := mustLoad(t, "X = '-' * 40\nY = 3 * 'ab'\nZ = 1000 * 1000\n", Options{})
	if got := h.globals["X"].String(); got != `"`+strings.Repeat("-", 40)+`"` {
		t.Errorf("X = %s", got)
	}
}

// A top level stuck in one step that nothing interrupts (one regular
// expression match within the work limit: a second or so, here) is
// abandoned soon after its deadline: Load returns, the goroutine finishes
// on its own.
func TestLoadAbandonsStuckTopLevel(t *testing.T) {
	defer func(d time.Duration) { abandonAfter = d }(abandonAfter)
	abandonAfter = 200 * time.Millisecond
	start := time.Now()
	le := loadErr(t, "S = 'a ' * 500000\nX = re.search(r'(\\w+\\s*){20}q', S)\n", Options{LoadTimeout: 100 * time.Millisecond})
	if !errors.Is(le, ErrDeadline) {
		t.Errorf("%v does not match ErrDeadline", le)
	}
	wantContains(t, "error", le.Error(), "top level: did not return within 200ms of its deadline", "abandoned")
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Load returned after %v", el)
	}
}
