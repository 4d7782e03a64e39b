package harness

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// The builtins and method checks that run the walks of compare.go before
// the operation they guard.

// compareGuard is x op y for a comparison operator.
func compareGuard(op syntax.Token) *starlark.Builtin {
	name := op.String()
	return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 2 || len(kwargs) != 0 {
			return nil, fmt.Errorf("%s: want 2 operands", name)
		}
		x, y := args[0], args[1]
		if isContainer(x) && isContainer(y) {
			w := walker{max: MaxCompareWork}
			w.cmp(op, x, y, starlark.CompareLimit)
			if err := w.finish(th, name); err != nil {
				return nil, err
			}
		}
		ok, err := starlark.Compare(op, x, y)
		if err != nil {
			return nil, err
		}
		return starlark.Bool(ok), nil
	})
}

// inGuard is x in y, or x not in y.
func inGuard(op syntax.Token) *starlark.Builtin {
	name := op.String()
	return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 2 || len(kwargs) != 0 {
			return nil, fmt.Errorf("%s: want 2 operands", name)
		}
		if err := checkIn(th, name, args[0], args[1]); err != nil {
			return nil, err
		}
		return starlark.Binary(op, args[0], args[1])
	})
}

// keyGuard is a dict key about to be hashed: {k: v}, {k: v for ...},
// d[k] = v.
func keyGuard(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 1 || len(kwargs) != 0 {
		return nil, fmt.Errorf("key: want 1 operand")
	}
	if err := checkKey(th, "dict key", args[0]); err != nil {
		return nil, err
	}
	return args[0], nil
}

// dictKeyGuard is a key of a dict literal of several entries: besides the
// hash, Starlark's error for a duplicate key prints the whole key, which
// must not be a string of gigabytes (a tuple sharing a long string).
func dictKeyGuard(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 1 || len(kwargs) != 0 {
		return nil, fmt.Errorf("key: want 1 operand")
	}
	k := args[0]
	if _, ok := k.(starlark.Tuple); ok {
		if err := checkKey(th, "dict key", k); err != nil {
			return nil, err
		}
		lim := limitsOf(th)
		max := int64(lim.MaxAllocBytes)
		n, err := textSize(k, true, max)
		if err == nil && n > max {
			err = memoryError("a dict key whose text is more than %d bytes (MaxAllocBytes) in a dict literal (Starlark's error for a duplicate key prints it); build the dict with d[k] = v", max)
		}
		if err != nil {
			return nil, err
		}
	}
	return k, nil
}

// keyArgCheck bounds a method that hashes its first argument: d.get(k),
// d.setdefault(k), d.pop(k), s.add(x), s.remove(x), s.discard(x).
func keyArgCheck(name string) methodCheck {
	return func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		if len(args) == 0 {
			return nil
		}
		return checkKey(th, name, args[0])
	}
}

// memberCheck bounds l.index(x) and l.remove(x), which compare x with the
// list's elements until one is equal.
func memberCheck(name string) methodCheck {
	return func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		if len(args) == 0 || !costlyNeedle(args[0]) {
			return nil
		}
		w := walker{max: MaxCompareWork}
		w.member(args[0], x.(*starlark.List))
		return w.finish(th, name)
	}
}
