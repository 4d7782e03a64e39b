package harness

import (
	"cmp"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Comparing and hashing. go.starlark.net compares two values (== != < <=
// > >=, in, a dict lookup, each comparison of a sort) and hashes a dict key
// or set element in one step of the interpreter, visiting every element of
// nested lists and tuples (a shared one each time it is reached) with no
// step counted and no look at the deadline or the context: for a =
// [0]*1000000, B = [a]*1000000 and C = [list(a)]*1000000, B == C makes
// 10¹² comparisons. Load rewrites comparisons, membership tests and dict
// keys into calls of the guards below (rewrite.go), and the bounded
// builtins and methods (sorted, min, max, dict, set, d.get, s.add, l.index,
// s | t, ...) call the same checks. A check walks the operands as the
// operation will, counting the elements it visits, refuses the operation
// once the count passes MaxCompareWork (MaxSortWork for the comparisons of
// one sort), and charges the count to the call as work (runner.charge: the
// deadline and the context are looked at every million); then Starlark does
// the operation, so results and errors are Starlark's.
//
// The walks follow go.starlark.net's own algorithms (CompareDepth,
// sliceCompare, dictsEqual, setsEqual, Tuple.Hash, the hash table's
// lookups), so a comparison's walk stops where the comparison stops: at
// lists of different lengths, at the first pair of elements that differ,
// at the depth limit (starlark.CompareLimit), and costs about what the
// comparison costs. Comparing values that are not both lists, tuples,
// dicts or sets, or hashing one that is not a tuple, takes one look and is
// not walked.

// Bytes of a string that count as one element visited: memcmp and the
// runtime's hash take some nanoseconds for these, as a visit does.
const (
	cmpStringBytes  = 256
	hashStringBytes = 128
)

// A walker counts the elements an operation visits, up to max.
type walker struct {
	n, max int64
	over   bool // the operation would visit more than max
	failed bool // the operation fails where the walk stopped (Starlark reports it)
}

func (w *walker) halted() bool { return w.over || w.failed }

func (w *walker) visit(k int64) bool {
	if w.n += k; w.n > w.max {
		w.over = true
		return false
	}
	return true
}

// finish refuses the operation op when its walk passed MaxCompareWork, and
// charges the walk to the call otherwise.
func (w *walker) finish(th *starlark.Thread, op string) error {
	if w.over {
		return tooMuchWork(op, w.max, "MaxCompareWork")
	}
	return work(th, w.n)
}

// isContainer reports whether comparing v may visit other values.
func isContainer(v starlark.Value) bool {
	switch v.(type) {
	case *starlark.List, starlark.Tuple, *starlark.Dict, *starlark.Set:
		return true
	}
	return false
}

// costlyNeedle reports whether comparing x with each element of a list
// needs counting: a container, or a long string (which may equal many
// elements in length).
func costlyNeedle(x starlark.Value) bool {
	switch x := x.(type) {
	case *starlark.List, starlark.Tuple, *starlark.Dict, *starlark.Set:
		return true
	case starlark.String:
		return len(x) >= cmpStringBytes
	case starlark.Bytes:
		return len(x) >= cmpStringBytes
	}
	return false
}

// cmp walks CompareDepth(op, x, y, depth) and returns its result as far as
// the walk knows it (nothing when it halted).
func (w *walker) cmp(op syntax.Token, x, y starlark.Value, depth int) bool {
	if depth < 1 {
		w.failed = true // "comparison exceeded maximum recursion depth"
		return false
	}
	if w.n++; w.n > w.max {
		w.over = true
		return false
	}
	var bytes int
	switch x := x.(type) {
	case starlark.Int: // as Int.Cmp, without the detour through reflection
		if y, ok := y.(starlark.Int); ok {
			if a, ok := x.Int64(); ok {
				if b, ok := y.Int64(); ok {
					return threeway(op, cmp.Compare(a, b))
				}
			}
		}
	case starlark.String: // as String.CompareSameType
		if y, ok := y.(starlark.String); ok {
			if n := cmpBytes(op, len(x), len(y)); n >= cmpStringBytes && !w.visit(int64(n/cmpStringBytes)) {
				return false
			}
			return threeway(op, strings.Compare(string(x), string(y)))
		}
	case *starlark.List:
		if y, ok := y.(*starlark.List); ok {
			return w.seq(op, x, y, depth)
		}
	case starlark.Tuple:
		if y, ok := y.(starlark.Tuple); ok {
			return w.seq(op, x, y, depth)
		}
	case *starlark.Dict:
		if y, ok := y.(*starlark.Dict); ok {
			return w.dicts(op, x, y, depth)
		}
	case *starlark.Set:
		if y, ok := y.(*starlark.Set); ok {
			return w.sets(op, x, y, depth)
		}
	case starlark.Bytes:
		if y, ok := y.(starlark.Bytes); ok {
			bytes = cmpBytes(op, len(x), len(y))
		}
	}
	if bytes >= cmpStringBytes && !w.visit(int64(bytes/cmpStringBytes)) {
		return false
	}
	ok, err := starlark.CompareDepth(op, x, y, depth)
	if err != nil {
		w.failed = true
	}
	return ok
}

// cmpBytes is how many bytes comparing two strings of lengths nx and ny
// by op may read: none for == of different lengths.
func cmpBytes(op syntax.Token, nx, ny int) int {
	if nx != ny && (op == syntax.EQL || op == syntax.NEQ) {
		return 0
	}
	return min(nx, ny)
}

// seq walks sliceCompare: lengths first for == and !=, then pairs of
// elements up to the first that differ.
func (w *walker) seq(op syntax.Token, x, y starlark.Indexable, depth int) bool {
	nx, ny := x.Len(), y.Len()
	if nx != ny && (op == syntax.EQL || op == syntax.NEQ) {
		return op == syntax.NEQ
	}
	for i := 0; i < nx && i < ny; i++ {
		eq := w.cmp(syntax.EQL, x.Index(i), y.Index(i), depth-1)
		if w.halted() {
			return false
		}
		if !eq {
			switch op {
			case syntax.EQL:
				return false
			case syntax.NEQ:
				return true
			}
			return w.cmp(op, x.Index(i), y.Index(i), depth-1)
		}
	}
	return threeway(op, nx-ny)
}

// dicts walks dictsEqual: each key of x looked up in y, its values
// compared.
func (w *walker) dicts(op syntax.Token, x, y *starlark.Dict, depth int) bool {
	if op != syntax.EQL && op != syntax.NEQ {
		w.failed = true // "dict < dict not implemented"
		return false
	}
	if x.Len() != y.Len() {
		return op == syntax.NEQ
	}
	// (Items, not Entries: a walker captured by an iterator's closure
	// would be allocated on every comparison.)
	for _, kv := range x.Items() {
		if w.lookup(kv[0]); w.halted() {
			return false
		}
		yv, found, _ := y.Get(kv[0])
		if !found {
			return op == syntax.NEQ
		}
		eq := w.cmp(syntax.EQL, kv[1], yv, depth-1)
		if w.halted() {
			return false
		}
		if !eq {
			return op == syntax.NEQ
		}
	}
	return op == syntax.EQL
}

// sets walks Set.CompareSameType: lengths first, then each element of one
// set looked up in the other.
func (w *walker) sets(op syntax.Token, x, y *starlark.Set, depth int) bool {
	looked := y
	switch op {
	case syntax.EQL, syntax.NEQ:
		if x.Len() != y.Len() {
			return op == syntax.NEQ
		}
		looked = x
	case syntax.GE:
		if x.Len() < y.Len() {
			return false
		}
	case syntax.LE:
		if x.Len() > y.Len() {
			return false
		}
	case syntax.GT:
		if x.Len() <= y.Len() {
			return false
		}
	case syntax.LT:
		if x.Len() >= y.Len() {
			return false
		}
	default:
		w.failed = true
		return false
	}
	if w.lookupAll(looked); w.halted() {
		return false
	}
	ok, err := starlark.CompareDepth(op, x, y, depth)
	if err != nil {
		w.failed = true
	}
	return ok
}

// threeway is go.starlark.net's: a three-way comparison's result as op.
func threeway(op syntax.Token, cmp int) bool {
	switch op {
	case syntax.EQL:
		return cmp == 0
	case syntax.NEQ:
		return cmp != 0
	case syntax.LE:
		return cmp <= 0
	case syntax.LT:
		return cmp < 0
	case syntax.GE:
		return cmp >= 0
	case syntax.GT:
		return cmp > 0
	}
	return false
}

// member walks Has of a list or tuple: x compared with each element until
// one is equal.
func (w *walker) member(x starlark.Value, seq starlark.Indexable) {
	depth := starlark.CompareLimit
	for i := 0; i < seq.Len(); i++ {
		if eq := w.cmp(syntax.EQL, seq.Index(i), x, depth); eq || w.halted() {
			return
		}
	}
}

type hashFrame struct {
	t starlark.Tuple
	i int
}

// hash walks v.Hash(): a tuple hashes its elements in order, depth first,
// and fails at the first that is a list, dict or set.
func (w *walker) hash(v starlark.Value) {
	t, ok := v.(starlark.Tuple)
	if !ok {
		w.hashLeaf(v)
		return
	}
	if !w.visit(1) {
		return
	}
	var buf [8]hashFrame
	stack := append(buf[:0], hashFrame{t: t})
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.i == len(top.t) {
			stack = stack[:len(stack)-1]
			continue
		}
		e := top.t[top.i]
		top.i++
		if et, ok := e.(starlark.Tuple); ok {
			if !w.visit(1) {
				return
			}
			stack = append(stack, hashFrame{t: et})
			continue
		}
		if !w.hashLeaf(e) {
			return
		}
	}
}

func (w *walker) hashLeaf(v starlark.Value) bool {
	switch x := v.(type) {
	case starlark.String:
		return w.visit(1 + int64(len(x)/hashStringBytes))
	case starlark.Bytes:
		return w.visit(1 + int64(len(x)/hashStringBytes))
	case *starlark.List, *starlark.Dict, *starlark.Set:
		w.failed = true // "unhashable type: list"
		return false
	}
	return w.visit(1)
}

// lookup walks a hash table's lookup or insertion of k: its hash, and a
// comparison with the key of the same hash found (which visits no more).
func (w *walker) lookup(k starlark.Value) {
	n := w.n
	if w.hash(k); !w.halted() {
		w.visit(w.n - n)
	}
}

// insertAll walks inserting each element of v into a hash table (set(v),
// s.union(v), ...) or, with pairs, the first element of each (dict(v),
// d.update(v)); a dict's keys either way.
func (w *walker) insertAll(v starlark.Value, pairs bool) {
	switch v.(type) {
	case *starlark.Dict, *starlark.Set:
		pairs = false // a dict iterates over its keys
	}
	it := starlark.Iterate(v)
	if it == nil {
		return
	}
	defer it.Done()
	var e starlark.Value
	for it.Next(&e) {
		if pairs {
			p, ok := e.(starlark.Indexable)
			if !ok || p.Len() != 2 {
				return // Starlark reports it
			}
			e = p.Index(0)
		}
		if w.lookup(e); w.halted() {
			return
		}
	}
}

// lookupAll walks looking each element of s up in a hash table.
func (w *walker) lookupAll(s *starlark.Set) {
	w.insertAll(s, false)
}

// checkKey bounds hashing k (a dict key, a set element, d[k], d.get(k)):
// only a tuple can take long.
func checkKey(th *starlark.Thread, op string, k starlark.Value) error {
	if _, ok := k.(starlark.Tuple); !ok {
		return nil
	}
	w := walker{max: MaxCompareWork}
	w.lookup(k)
	return w.finish(th, op)
}

// checkInsertAll bounds inserting the elements of each of vs into a hash
// table (see walker.insertAll).
func checkInsertAll(th *starlark.Thread, op string, pairs bool, vs ...starlark.Value) error {
	w := walker{max: MaxCompareWork}
	for _, v := range vs {
		if w.insertAll(v, pairs); w.over {
			break
		}
	}
	return w.finish(th, op)
}

// checkIn bounds x in y (and x not in y): a list or tuple compares x with
// its elements until one is equal, a dict or set looks x up.
func checkIn(th *starlark.Thread, op string, x, y starlark.Value) error {
	w := walker{max: MaxCompareWork}
	switch y := y.(type) {
	case *starlark.List:
		if !costlyNeedle(x) {
			return nil
		}
		w.member(x, y)
	case starlark.Tuple:
		if !costlyNeedle(x) {
			return nil
		}
		w.member(x, y)
	case *starlark.Dict, *starlark.Set:
		return checkKey(th, op, x)
	default:
		return nil
	}
	return w.finish(th, op)
}
