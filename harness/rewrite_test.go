package harness

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// nativeExec runs src as Starlark would without the runtime's rewrite and
// bounded builtins, and returns its globals' reprs or its error message.
func nativeExec(t *testing.T, src string) (map[string]string, string) {
	t.Helper()
	th := &starlark.Thread{Name: "native", Print: func(*starlark.Thread, string) {}}
	th.SetMaxExecutionSteps(1_000_000)
	pre := starlark.StringDict{"json": jsonModule, "re": reModule}
	g, err := starlark.ExecFileOptions(fileOptions, th, "h.star", src, pre)
	if err != nil {
		var ee *starlark.EvalError
		if errors.As(err, &ee) {
			return nil, ee.Msg
		}
		return nil, err.Error()
	}
	return reprs(g), ""
}

// guardedExec runs src as Load does and returns the same.
func guardedExec(t *testing.T, src string) (map[string]string, string) {
	t.Helper()
	h, err := Load("h.star", []byte(src), Options{})
	if err != nil {
		var le *LoadError
		if errors.As(err, &le) && len(le.Problems) == 1 {
			return nil, strings.TrimPrefix(le.Problems[0].Msg, "top level: ")
		}
		return nil, err.Error()
	}
	return reprs(h.globals), ""
}

func reprs(g starlark.StringDict) map[string]string {
	m := map[string]string{}
	for k, v := range g {
		if !strings.HasPrefix(k, hiddenPrefix) {
			m[k] = v.String()
		}
	}
	return m
}

// The rewritten code means what the code means: the same values, the same
// aliasing (a list's += extends it in place), operands evaluated once,
// the same error messages.
func TestRewriteKeepsMeaning(t *testing.T) {
	programs := []string{
		// Operators.
		`a = 1 + 2
b = "a" + "b"
c = [1] + [2]
d = (1,) + (2,)
e = 3 - 1
f = set([1, 2]) - set([2])
g = "ab" * 3
h = 3 * "ab"
i = [1, 2] * 2
j = 2 * (1,)
k = "x" * -1
l = [0] * 0
m = "%s-%d-%r-%x-%o-%c" % ("a", 3, "b", 255, 8, 65)
n = "%(x)s and %(x)r" % {"x": "v"}
o = 7 % 3
p = -7 % 3
q = 1.5 % 1
r = {"a": 1} | {"b": 2}
s = set([1]) | set([2])
t = 1 << 10
u = 6 | 3
v = b"ab" + b"c"
w = b"ab" * 2
x = 10 * 10 * 10
y = "%f|%e|%g|%s" % (3.14159, 1e10, 0.5, 1e300)
z = 1.5 * 2
big = (1 << 63) * (1 << 63) - 1
`,
		// Augmented assignment: in place where the interpreter is.
		`x = [1]
y = x
x += [2]
x += (3,)
x += {"k": 1}
s = "a"
s += "b"
s *= 3
n = 5
n -= 2
n *= 3
n //= 2
n %= 4
n <<= 3
n >>= 1
n |= 1
n &= 7
n ^= 2
f = 1.0
f /= 4
d = {"a": 1}
d2 = d
d |= {"b": 2}
st = set([1])
st |= set([2])
t = (1,)
t += (2,)
t *= 2
`,
		// Augmented assignment to an element: operands evaluated once.
		`counts = {}
for w in ["a", "b", "a"]:
    counts[w] = counts.get(w, 0) + 1
m = {"k": [1]}
alias = m["k"]
m["k"] += [2]
m["k"] *= 2
l = [1, 2, 3]
l[0] += 10
l[-1] *= 2
l[1] -= 1
calls = []
def g():
    calls.append(1)
    return 0
l2 = [0, 0]
l2[g()] += 5
def f():
    z = [1]
    z += [2]
    zz = {"a": [0]}
    zz["a"] += [1]
    return z, zz
fz = f()
`,
		// Slices and indexing.
		`s = "hello"
a = s[1:3]
b = s[::-1]
c = s[-2:]
d = s[:-1:2]
e = [1, 2, 3, 4][::2]
f = (1, 2, 3)[1:]
g = [1, 2, 3][5:]
h = [1, 2, 3][-10:2]
i = s[3:1]
j = [1, 2, 3, 4, 5][4:1:-1]
k = list(range(10)[2:8:3])
l = b"abc"[1:]
m = [1, 2, 3][-1]
n = "abc"[1]
o = {"a": 1}["a"]
p = (1, 2)[0]
q = re.search("(a)(b)", "ab")[2]
r = [1, 2, 3][::-2]
t = s[-100:100]
`,
		// Methods.
		`a = ",".join(["a", "b"])
b = "{} {x}".format(1, x=2)
c = "{0}{0}{1!r}".format("a", "b")
d = "aXbX".replace("X", "yy")
e = "aaa".replace("a", "b", 2)
f = "a b  c".split()
g = "a,b".split(",")
h = "a,b,c".rsplit(",", 1)
i = "a\nb\n".splitlines()
j = "Ab".upper() + "Ab".lower() + "ab cd".title() + "ab".capitalize()
k = [1]
k.extend([2, 3])
k.extend(k)
dd = {}
dd.update({"a": 1}, b=2)
l = sorted({"b": 1, "a": 2}.items())
m = list({"a": 1}.keys()) + list({"a": 1}.values())
z = set([1, 2])
n = [z.union([3]), z.difference([2]), z.intersection([2]), z.symmetric_difference([2, 3])]
o = "".join([])
p = "a b".split(None, 1)
q = "abc".replace("", "-")
r = "x".join("abc".elems())
up = "ab".upper
s = up()
`,
		// Builtins.
		`a = [str(1), str("a"), repr("a"), str([1, "a"]), repr({"k": (1, None, True, 1.5)})]
b = list("ab".elems())
c = tuple([1])
d = sorted([3, 1], reverse=True)
e = list(reversed([1, 2]))
f = list(enumerate(["a"], 1))
g = list(zip([1, 2], "ab".elems()))
h = dict(a=1)
i = dict([("a", 1)], b=2)
j = set([1])
k = [int("12"), int("ff", 16), int(3.7)]
l = bytes("ab")
m = getattr("a", "upper")()
n = getattr("a", "nope", 5)
o = getattr("a,b", "split")(",")
def fn(*a, **k):
    return (a, k)
p = fn(*[1, 2], **{"x": 3})
q = json.encode({"a": [1, "x<y", 2.5, None]})
r = json.decode('{"a": [1, 2.5, "x", null, true]}')
s = json.encode_indent([1, {"b": 2}], indent="  ")
t = json.indent('{"a":[1,2]}')
u = list()
v = dict()
w = str(1 << 70)
x = [x * 2 for x in range(3)]
`,
		// Comparisons and membership tests, guarded (operands that are
		// not cheap) and not (a literal operand).
		`x = [1, [2, 3]]
y = [1, [2, 3]]
z = [1, [2, 4]]
t = (1, "a", (2.5, None))
u = (1, "a", (2.5, None))
nan = float("nan")
a = [x == y, x != y, x < z, x <= y, x > z, x >= z, z > x]
b = [t == u, t < (1, "b"), t != u, (t, t) == (u, u), [t] < [u]]
c = [x in [y], z in [x, y], x not in [z], t in [u], t in (u,), t not in [x]]
d = [{"a": x} == {"a": y}, {"a": x} != {"a": z}, {"a": x} == {"b": x}, {t: 1} == {u: 1}]
e = [set([t]) == set([u]), set([1]) < set([1, 2]), set([1, 2]) >= set([2]), set([1]) > set([1]), set([t]) <= set([u, 1])]
f = [[nan] == [nan], (nan,) != (nan,), nan == nan, [1] == [1.0], 1 == 1.0, [1] == (1,), x == t]
g = ["ab" < "b", "a" in "cat", 2 in range(5), None == None, x == None, t != None]
h = [len(x) == 2, x[0] < x[1][0], "k" in {"k": 1}, 3 not in {"k": 1}]
big = list(range(1000))
big2 = list(range(1000))
i = [big == big2, big < big2 + [0], [big] * 3 == [big2] * 3, (big,) in [(big2,)]]
s = "x" * 300
s2 = "x" * 300
j = [s == s2, s in [s2], s < s2 + "y", s in {s2: 1}]
k = [x in {"a": 1}, [x] in {"a": 1}, t in t, x in t]
def n(v):
    return v == [1] or v in ([1], [2])
l = [n([1]), n([2]), n([3])]
`,
		// Hashing: dict keys, lookups, set elements, methods, operators.
		`t = (1, (2, 3))
u = (1, (2, 3))
a = {t: 1, (4,): 2}
a[u] = 3
a[(5, 6)] = 4
b = {k: v for k, v in [(t, 1), (u, 2)]}
c = [a[t], a.get(u), a.get((9,), 0), t in a, (9,) not in a, a.setdefault((7,), 8), a.pop((7,)), a.pop((7,), None)]
d = dict([(t, 1), (u, 2)])
d.update([((3,), 4)])
d.update({(5,): 6})
d |= {t: 9}
e = d | {(6,): 7}
s = set([t, u, (3,)])
s.add((4, 5))
s.discard((3,))
s.remove((4, 5))
f = [t in s, (3,) in s, s.issubset([t, u, 1]), s.issuperset([u])]
g = [s | set([(8,)]), s & set([u]), s ^ set([u, (9,)]), s - set([t]), s.union([(1,)]), s.intersection([u]), s.difference([u]), s.symmetric_difference([(2,)])]
s2 = set([1, 2])
s2 &= set([2, 3])
s3 = set([1])
s3 ^= set([1, 4])
s4 = set()
s4.update([(1,), (2,)], [(3,)])
h = [6 & 3, 6 ^ 3, 6 | 3]
m = 6
m &= 3
m ^= 1
l = [[1, 2], [3]]
l2 = [3]
i = [l.index(l2), l.index([1, 2])]
l.remove(l2)
key = "k"
j = {key: 1, "other": 2}
j[key] += 1
`,
		// sorted, min and max: the same order and stability.
		`x = [[2, "b"], [1, "z"], [2, "a"], [1, "z"], [0]]
a = sorted(x)
b = sorted(x, reverse=True)
c = sorted(x, key=lambda p: p[0])
d = sorted(x, key=lambda p: p[0], reverse=True)
e = [min(x), max(x), min(x, key=len), max(x, key=lambda p: p[-1] if len(p) > 1 else ""), min(3, 1, 2), max("ab", "b")]
f = sorted({(2, 1): 1, (1, 2): 2})
g = sorted(["b", "a", "c"]) + sorted([3.5, 1, 2])
h = [sorted([(1, [2]), (1, [1])]), max([[1], [1, 0]]), min([(2,), (1, 5)])]
i = sorted(set([(3,), (1,), (2,)]))
`,
	}
	for i, src := range programs {
		want, wantErr := nativeExec(t, src)
		got, gotErr := guardedExec(t, src)
		if wantErr != "" || gotErr != "" {
			t.Errorf("program %d: native error %q, guarded error %q", i, wantErr, gotErr)
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got[k] != want[k] {
				t.Errorf("program %d: %s = %s, want %s", i, k, got[k], want[k])
			}
		}
		if len(got) != len(want) {
			t.Errorf("program %d: globals %v, want %v", i, got, want)
		}
	}

	errs := []string{
		"x = [1][5]",
		"x = [][0]",
		`x = {"a": 1}["b"]`,
		`x = "a" + 1`,
		`x = [1] * "x"`,
		`x = "%d" % "x"`,
		`x = "%s %s" % ("a",)`,
		`x = "a".nope`,
		`x = (1).join`,
		`x = "a".joinn`,
		"x = []\nx.extend(1)",
		"x = 1 // 0",
		"x = [1, 2][1.5]",
		"x = 1[0]",
		"x = 1[1:2]",
		"x = [1][::0]",
		`x = "{} {}".format(1)`,
		`x = "a".replace(1, 2)`,
		`x = ",".join([1])`,
		"x = {}\nx[[1]] = 1",
		"x = [1]\nx += 1",
		"x = {}\nx |= 1",
		`x = {"a": 1}
x["b"] += 1`,
		`x = getattr(1, "nope")`,
		`x = int("12x")`,
		`x = 1 << -1`,
		// Comparisons and hashing, through the guards.
		"a = [1]\nb = (1,)\nx = a < b",
		"a = {}\nb = {}\nx = a < b",
		"a = [1]\nb = [\"a\"]\nx = a < b",
		"a = [[1]]\nb = [[\"a\"]]\nx = a > b",
		"a = set([1])\nb = [1]\nx = a <= b",
		"a = 1\nb = 2\nx = a in b",
		"a = [1]\nb = set()\nx = a in b",
		"a = (1, [1])\nb = set()\nx = a in b",
		"k = [1]\nx = {k: 1}",
		"k = (1, [2])\nx = {k: 1}",
		"k = (1, [2])\nx = {k: 1, 2: 3}",
		"k = (1,)\nx = {k: 1, k: 2}",
		"k = (1, [2])\nx = {}\nx[k] = 1",
		"k = (1, [2])\nx = {}\nx[k] += 1",
		"k = (1, [2])\nx = {1: 2}[k]",
		"k = (1, [2])\nx = {k: 1 for i in [1]}",
		"l = []\nl.append(l)\nx = l == l",
		"t = ((((((((((((1,),),),),),),),),),),),)\nx = t == t",
		"t = ((((((((((((1,),),),),),),),),),),),)\nx = {t: 1, t: 2}",
		"a = [1, \"a\"]\nx = sorted(a)",
		"a = [[1], [\"a\"]]\nx = sorted(a)",
		"a = [[1], [\"a\"], [2]]\nx = sorted(a, key=lambda v: v, reverse=True)",
		"a = [1, 2]\nx = sorted(a, key=lambda v: v[0])",
		"a = [1]\nx = sorted(a, key=1)",
		"x = sorted()",
		"x = min([])",
		"x = max(1)",
		"x = min()",
		"a = [[1], [\"a\"]]\nx = max(a)",
		"a = [1, \"a\"]\nx = min(a)",
		"a = [1]\nx = max(a, k=len)",
		"a = [[1]]\nb = [3]\nx = a.index(b)",
		"a = [[1]]\nb = [3]\na.remove(b)",
		"x = set()\nk = (1,)\nx.remove(k)",
		"x = set()\nk = (1, [1])\nx.add(k)",
		"x = {}\nk = (1,)\ny = x.pop(k)",
		"x = {}\nk = [1]\ny = x.get(k)",
		"k = [[1]]\nx = set(k)",
		"k = [([1], 2)]\nx = dict(k)",
		"k = [(1, 2, 3)]\nx = dict(k)",
		"k = [([1], 2)]\nx = {}\nx.update(k)",
		"a = set([1])\nb = [1]\nx = a & b",
		"a = set([1])\nb = [1]\nx = a ^ b",
		"a = set([1])\na &= [1]",
		"a = set([1])\nb = [[1]]\nx = a.union(b)",
		"a = set([1])\nb = [[1]]\nx = a.issubset(b)",
		"a = {}\nb = {[1]: 2}",
	}
	for _, src := range errs {
		_, wantErr := nativeExec(t, src)
		_, gotErr := guardedExec(t, src)
		if wantErr == "" || gotErr != wantErr {
			t.Errorf("%s:\n  error %q\n  want  %q", src, gotErr, wantErr)
		}
	}
}
