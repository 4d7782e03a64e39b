package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Comparisons and hashes that go.starlark.net does in one uninterruptible
// step, each of which visits 10⁹ to 10¹² elements: each is an error naming
// the limit within seconds, at the top level and inside a hook, and the
// process (this test) survives.
func TestComparisonsAreBounded(t *testing.T) {
	const (
		lists  = "a = [0] * 1000000\nb = list(a)\nB = [a] * 1000000\nC = [b] * 1000000\n"
		tuples = "t = (((1,) * 1000,) * 1000,) * 1000\n"
	)
	cases := []struct {
		name, setup, stmt, limit string
	}{
		{"list ==", lists, "x = B == C", "== would visit more than 4194304 elements"},
		{"list !=", lists, "x = B != C", "!= would visit"},
		{"list <", lists, "x = B < C", "< would visit"},
		{"list >=", lists, "x = B >= C", ">= would visit"},
		{"list in", lists + "y = list(a)\ny[-1] = 1\n", "x = y in B", "in would visit"},
		{"list not in", lists + "y = list(a)\ny[-1] = 1\n", "x = y not in B", "not in would visit"},
		{"list index", lists + "y = list(a)\ny[-1] = 1\n", "x = B.index(y)", "index would visit"},
		{"list remove", lists + "y = list(a)\ny[-1] = 1\n", "B.remove(y)", "remove would visit"},
		{"list in tuple", lists + "y = list(a)\ny[-1] = 1\n", "x = y in tuple(B)", "in would visit"},
		{"nested list", lists, "x = [B] == [C]", "== would visit"},
		{"dict values", lists, "x = {1: B} == {1: C}", "== would visit"},
		{"sorted", lists, "x = sorted([B, C])", "sorted would visit more than 8388608 elements of its operands (MaxSortWork)"},
		{"sorted many", lists, "x = sorted(B)", "sorted would visit"},
		{"sorted key", lists, "x = sorted([1, 2], key = lambda i: B)", "sorted would visit"},
		{"min", lists, "x = min(B, C)", "min would visit"},
		{"max", lists, "x = max(B)", "max would visit"},
		{"tuple ==", tuples, "x = t == t", "== would visit more than 4194304 elements"},
		{"tuple <", tuples, "x = t < t", "< would visit"},
		{"tuple in", tuples, "x = t in [t]", "in would visit"},
		{"dict key", tuples, "x = {t: 1}", "dict key would visit"},
		{"dict keys", tuples, "x = {t: 1, 2: 3}", "dict key would visit"},
		{"dict comprehension", tuples, "x = {k: 1 for k in [t]}", "dict key would visit"},
		{"index assignment", tuples, "d = {}\nd[t] = 1", "dict key would visit"},
		{"augmented index assignment", tuples, "d = {}\nd[t] += 1", "index would visit"},
		{"dict lookup", tuples, "d = {1: 2}\nx = d[t]", "index would visit"},
		{"dict in", tuples, "d = {1: 2}\nx = t in d", "in would visit"},
		{"dict get", tuples, "x = {}.get(t)", "get would visit"},
		{"dict setdefault", tuples, "x = {}.setdefault(t)", "setdefault would visit"},
		{"dict pop", tuples, "x = {}.pop(t, 0)", "pop would visit"},
		{"dict()", tuples, "x = dict([(t, 1)])", "dict() would visit"},
		{"dict update", tuples, "d = {}\nd.update([(t, 1)])", "update would visit"},
		{"set element", tuples, "x = set([t])", "set() would visit"},
		{"set in", tuples, "x = t in set([1])", "in would visit"},
		{"set add", tuples, "s = set()\ns.add(t)", "add would visit"},
		{"set union", tuples, "x = set().union([t])", "set operation would visit"},
		{"set issubset", tuples, "x = set().issubset([t])", "set operation would visit"},
	}
	for _, tc := range cases {
		check := func(t *testing.T, err error, el time.Duration) {
			t.Helper()
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrMemory) {
				t.Errorf("%v does not match ErrMemory", err)
			}
			limit := "MaxCompareWork"
			if strings.Contains(tc.limit, "sorted") || strings.Contains(tc.limit, "min") || strings.Contains(tc.limit, "max") {
				limit = "MaxSortWork"
			}
			wantContains(t, "error", err.Error(), "memory limit: "+tc.limit, limit)
			// Unbounded, each takes hours; the bound is loose so that a
			// loaded CI machine or the race detector (1-3 s) passes.
			if el > 30*time.Second {
				t.Errorf("took %v", el)
			}
		}
		t.Run(tc.name+"/top level", func(t *testing.T) {
			start := time.Now()
			_, err := Load("h.star", []byte(tc.setup+tc.stmt+"\n"), Options{})
			check(t, err, time.Since(start))
		})
		t.Run(tc.name+"/hook", func(t *testing.T) {
			body := "    " + strings.ReplaceAll(strings.TrimSpace(tc.setup+tc.stmt), "\n", "\n    ")
			h := mustLoad(t, "def should_stop(state):\n"+body+"\n    return False\n", Options{})
			start := time.Now()
			_, err := h.Call(bg, "should_stop", state())
			check(t, err, time.Since(start))
		})
	}
}

// The same operations on values of ordinary size work, and the walk costs
// what the comparison costs: lists of a million elements that differ at
// the first, or have different lengths, compare at once.
func TestComparisonsWithinLimits(t *testing.T) {
	src := `
a = [0] * 1000000
b = list(a)
c = [1] + a[1:]
A = [a] * 3
E = a == b
F = a == c
G = a < c
H = [a] * 1000000 == [a] * 999999
I = b in A
T = ((1,) * 100,) * 1000
U = {T: 1, (T, T): 2}
V = T in U and (T, T) in U
W = sorted([(i % 7, str(i)) for i in range(10000)])[:3]
X = max([[i % 13, [i]] for i in range(10000)])
S = set([(i, (i, i)) for i in range(1000)])
Y = (5, (5, 5)) in S
`
	h := mustLoad(t, src, Options{})
	for name, want := range map[string]string{
		"E": "True", "F": "False", "G": "True", "H": "False", "I": "True",
		"V": "True", "W": `[(0, "0"), (0, "1001"), (0, "1008")]`, "X": "[12, [9996]]", "Y": "True",
	} {
		if got := h.globals[name].String(); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

// The walk of a comparison stops where the comparison does.
func TestCompareWalkStopsEarly(t *testing.T) {
	big := make([]starlark.Value, 1_000_000)
	for i := range big {
		big[i] = starlark.MakeInt(0)
	}
	other := append([]starlark.Value{starlark.MakeInt(1)}, big[1:]...)
	x, y := starlark.NewList(big), starlark.NewList(other)
	shorter := starlark.NewList(big[1:])
	for _, tc := range []struct {
		op      syntax.Token
		x, y    starlark.Value
		maxWalk int64
	}{
		{syntax.EQL, x, y, 3},
		{syntax.LT, x, y, 4},
		{syntax.EQL, x, shorter, 1},
		{syntax.NEQ, starlark.Tuple{x, x}, starlark.Tuple{y, x}, 4},
		{syntax.EQL, x, x, 1_000_001},
	} {
		w := walker{max: MaxCompareWork}
		got := w.cmp(tc.op, tc.x, tc.y, starlark.CompareLimit)
		want, err := starlark.Compare(tc.op, tc.x, tc.y)
		if err != nil || got != want || w.halted() {
			t.Errorf("%s: walk %v (halted %v), Starlark %v %v", tc.op, got, w.halted(), want, err)
		}
		if w.n > tc.maxWalk {
			t.Errorf("%s: walked %d elements, want at most %d", tc.op, w.n, tc.maxWalk)
		}
	}
}

// The bounds of json.decode and json.indent read strings as the decoder
// does: brackets, commas and escaped quotes inside strings count for
// nothing, and json.indent's estimate is never short.
func TestJSONScanner(t *testing.T) {
	texts := []struct {
		s        string
		maxDepth int
	}{
		{`{"a": [1, 2, {"b": "x,y:[z]"}], "c": "q\"[{,"}`, 3},
		{`["\\", "\\\"", "[", "]", "{", "}", ",", ":"]`, 1},
		{`[[[[["\u005b"]]]]]`, 5},
		{`"unterminated [ { , :`, 0},
		{`["trailing backslash \`, 1},
	}
	for _, tc := range texts {
		var depth, maxDepth int
		sc := jsonScanner{s: tc.s}
		for {
			c, ok := sc.next()
			if !ok {
				break
			}
			switch c {
			case '[', '{':
				depth++
				maxDepth = max(maxDepth, depth)
			case ']', '}':
				depth--
			}
		}
		if maxDepth != tc.maxDepth {
			t.Errorf("%s: depth %d, want %d", tc.s, maxDepth, tc.maxDepth)
		}
		if !json.Valid([]byte(tc.s)) {
			continue
		}
		for _, ind := range []string{"", "\t", "    "} {
			out, err := starlark.Call(&starlark.Thread{}, jsonModule.Members["indent"], starlark.Tuple{starlark.String(tc.s)}, []starlark.Tuple{{starlark.String("indent"), starlark.String(ind)}, {starlark.String("prefix"), starlark.String(">>")}})
			if err != nil {
				t.Fatalf("%s: %v", tc.s, err)
			}
			if n := indentSize(tc.s, 2, len(ind)); n < int64(len(out.(starlark.String))) {
				t.Errorf("%s indent %q: estimate %d < %d", tc.s, ind, n, len(out.(starlark.String)))
			}
		}
	}
	le := loadErr(t, "X = json.decode('[' * 1001 + ']' * 1001)\n", Options{})
	wantContains(t, "error", le.Error(), "MaxNesting")
	mustLoad(t, "X = json.decode('[\"' + '[' * 5000 + '\"]')\n", Options{})
}

// The hidden temporaries of the rewrite are no globals of the module and
// keep nothing alive.
func TestRewriteTemporariesAreNotGlobals(t *testing.T) {
	h := mustLoad(t, "d = {'a': [1]}\nd['a'] += [2]\nl = [0]\nl[0] += 1\nm = [[0]]\nm[0][0] += 1\n", Options{})
	for name := range h.globals {
		if strings.HasPrefix(name, hiddenPrefix) {
			t.Errorf("global %s", name)
		}
	}
	if got := fmt.Sprint(h.globals["d"], h.globals["l"], h.globals["m"]); got != `{"a": [1, 2]} [1] [[1]]` {
		t.Errorf("globals %s", got)
	}
}
