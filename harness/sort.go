package harness

import (
	"fmt"
	"sort"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// A sortCounter counts the comparisons of one sorted(), min() or max()
// call: those of two containers are walked, up to MaxSortWork for the
// call; the others are counted as work a few thousand at a time, so that
// a sort of many strings looks at the deadline too.
type sortCounter struct {
	th    *starlark.Thread
	op    string
	used  int64
	cheap int64
}

const cheapBatch = 1 << 12

// check counts comparing x and y by op, or says why the call must stop.
func (c *sortCounter) check(op syntax.Token, x, y starlark.Value) error {
	if !isContainer(x) || !isContainer(y) {
		if c.cheap++; c.cheap == cheapBatch {
			c.cheap = 0
			return work(c.th, cheapBatch)
		}
		return nil
	}
	w := walker{max: MaxSortWork - c.used}
	w.cmp(op, x, y, starlark.CompareLimit)
	c.used += w.n
	if w.over {
		return tooMuchWork(c.op, MaxSortWork, "MaxSortWork")
	}
	return work(c.th, w.n)
}

// sortedBuiltin is go.starlark.net's sorted (the same code, so the same
// order and errors) with its result's size bounded and its comparisons
// counted: once they pass a limit, or the deadline, the remaining
// comparisons of the sort answer at once and the call fails.
func sortedBuiltin(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := seqPre("sorted", "list", elemBytes)(th, limitsOf(th), args, kwargs); err != nil {
		return nil, err
	}
	var (
		iterable starlark.Iterable
		key      starlark.Callable
		reverse  bool
	)
	if err := starlark.UnpackArgs("sorted", args, kwargs, "iterable", &iterable, "key?", &key, "reverse?", &reverse); err != nil {
		return nil, err
	}
	iter := iterable.Iterate()
	defer iter.Done()
	var values []starlark.Value
	if n := starlark.Len(iterable); n > 0 {
		values = make(starlark.Tuple, 0, n)
	}
	var x starlark.Value
	for iter.Next(&x) {
		values = append(values, x)
	}
	var keys []starlark.Value
	if key != nil {
		keys = make([]starlark.Value, len(values))
		for i, v := range values {
			k, err := starlark.Call(th, key, starlark.Tuple{v}, nil)
			if err != nil {
				return nil, err // to preserve the backtrace, as Starlark
			}
			keys[i] = k
		}
	}
	s := &sortSlice{keys: keys, values: values, c: sortCounter{th: th, op: "sorted"}}
	if reverse {
		sort.Stable(sort.Reverse(s))
	} else {
		sort.Stable(s)
	}
	if s.stop != nil {
		return nil, s.stop
	}
	return starlark.NewList(s.values), s.err
}

type sortSlice struct {
	keys   []starlark.Value // nil: values[i] is its own key
	values []starlark.Value
	err    error // Starlark's: the last comparison that failed
	stop   error // a limit or the deadline
	c      sortCounter
}

func (s *sortSlice) Len() int { return len(s.values) }

func (s *sortSlice) Less(i, j int) bool {
	if s.stop != nil {
		return false
	}
	keys := s.keys
	if keys == nil {
		keys = s.values
	}
	if err := s.c.check(syntax.LT, keys[i], keys[j]); err != nil {
		s.stop = err
		return false
	}
	ok, err := starlark.Compare(syntax.LT, keys[i], keys[j])
	if err != nil {
		s.err = err
	}
	return ok
}

func (s *sortSlice) Swap(i, j int) {
	if s.keys != nil {
		s.keys[i], s.keys[j] = s.keys[j], s.keys[i]
	}
	s.values[i], s.values[j] = s.values[j], s.values[i]
}

// minmaxBuiltin is go.starlark.net's min and max with their comparisons
// counted.
func minmaxBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("%s requires at least one positional argument", b.Name())
	}
	var keyFunc starlark.Callable
	if err := starlark.UnpackArgs(b.Name(), nil, kwargs, "key?", &keyFunc); err != nil {
		return nil, err
	}
	op := syntax.LT
	if b.Name() == "max" {
		op = syntax.GT
	}
	var iterable starlark.Value
	if len(args) == 1 {
		iterable = args[0]
	} else {
		iterable = args
	}
	iter := starlark.Iterate(iterable)
	if iter == nil {
		return nil, fmt.Errorf("%s: %s value is not iterable", b.Name(), iterable.Type())
	}
	defer iter.Done()
	var extremum starlark.Value
	if !iter.Next(&extremum) {
		return nil, fmt.Errorf("%s: argument is an empty sequence", b.Name())
	}
	var (
		extremeKey starlark.Value
		keyargs    starlark.Tuple
	)
	if keyFunc == nil {
		extremeKey = extremum
	} else {
		keyargs = starlark.Tuple{extremum}
		res, err := starlark.Call(th, keyFunc, keyargs, nil)
		if err != nil {
			return nil, err
		}
		extremeKey = res
	}
	c := sortCounter{th: th, op: b.Name()}
	var x starlark.Value
	for iter.Next(&x) {
		key := x
		if keyFunc != nil {
			keyargs[0] = x
			res, err := starlark.Call(th, keyFunc, keyargs, nil)
			if err != nil {
				return nil, err
			}
			key = res
		}
		if err := c.check(op, key, extremeKey); err != nil {
			return nil, err
		}
		if ok, err := starlark.Compare(op, key, extremeKey); err != nil {
			return nil, fmt.Errorf("%s: %v", b.Name(), err)
		} else if ok {
			extremum = x
			extremeKey = key
		}
	}
	return extremum, nil
}
