package harness

import (
	"fmt"
	"math/bits"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Guards: the builtins that the rewritten syntax tree calls (rewrite.go)
// and the versions of Starlark's own builtins and methods that bound
// their results. Each computes the size of what it is about to make,
// refuses a value above Options.MaxAllocBytes (a *limitError matching
// ErrMemory, naming the limit), charges the bytes to the call
// (runner.charge: the MaxMemoryBytes budget, the deadline and heap polls)
// and then runs Starlark's own operation, so results and error messages
// are Starlark's.

// guardBuiltins are the hidden builtins the rewritten code calls.
var guardBuiltins = func() starlark.StringDict {
	d := starlark.StringDict{
		guardIndex:   starlark.NewBuiltin("index", indexGuard),
		guardSlice:   starlark.NewBuiltin("slice", sliceGuard),
		guardAttr:    starlark.NewBuiltin("getattr", attrGuard),
		guardStar:    starlark.NewBuiltin("*args", starGuard(elemBytes)),
		guardStar2:   starlark.NewBuiltin("**kwargs", starGuard(2*elemBytes)),
		guardKey:     starlark.NewBuiltin("key", keyGuard),
		guardDictKey: starlark.NewBuiltin("key", dictKeyGuard),
	}
	for op, name := range guardedOps {
		d[name] = binaryGuard(op)
	}
	for op, name := range compareOps {
		if op == syntax.IN || op == syntax.NOT_IN {
			d[name] = inGuard(op)
		} else {
			d[name] = compareGuard(op)
		}
	}
	for _, op := range augOps {
		d[augGuardName(op)] = augGuard(op)
	}
	return d
}()

// binaryGuard is x op y for a guarded operator.
func binaryGuard(op syntax.Token) *starlark.Builtin {
	return starlark.NewBuiltin(op.String(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 2 || len(kwargs) != 0 {
			return nil, fmt.Errorf("%s: want 2 operands", op)
		}
		x, y := args[0], args[1]
		if err := checkBinary(th, op.String(), op, x, y); err != nil {
			return nil, err
		}
		return starlark.Binary(op, x, y)
	})
}

// checkBinary refuses x op y (written name) when its result would pass
// the per-value limit, and charges its size.
func checkBinary(th *starlark.Thread, name string, op syntax.Token, x, y starlark.Value) error {
	switch op {
	case syntax.PLUS, syntax.MINUS:
		switch x := x.(type) {
		case starlark.Int:
			if y, ok := y.(starlark.Int); ok {
				return intResult(th, name, max(intBits(x), intBits(y))+1)
			}
		case starlark.String:
			if y, ok := y.(starlark.String); ok && op == syntax.PLUS {
				return sized(th, name, "string", int64(len(x))+int64(len(y)))
			}
		case starlark.Bytes:
			if y, ok := y.(starlark.Bytes); ok && op == syntax.PLUS {
				return sized(th, name, "bytes", int64(len(x))+int64(len(y)))
			}
		case *starlark.List:
			if y, ok := y.(*starlark.List); ok && op == syntax.PLUS {
				return sized(th, name, "list", int64(x.Len())+int64(y.Len()))
			}
		case starlark.Tuple:
			if y, ok := y.(starlark.Tuple); ok && op == syntax.PLUS {
				return sized(th, name, "tuple", int64(len(x))+int64(len(y)))
			}
		case *starlark.Set:
			if y, ok := y.(*starlark.Set); ok && op == syntax.MINUS {
				if err := charge(th, int64(x.Len())*entryBytes); err != nil {
					return err
				}
				return checkInsertAll(th, name, false, x, y)
			}
		}
	case syntax.STAR:
		if xi, ok := x.(starlark.Int); ok {
			if yi, ok := y.(starlark.Int); ok {
				return intResult(th, name, intBits(xi)+intBits(yi))
			}
			x, y = y, x // n * seq
		}
		n, ok := y.(starlark.Int)
		if !ok {
			return nil
		}
		count, ok := n.Int64()
		if !ok || count <= 0 {
			return nil // Starlark refuses it, or it is empty
		}
		var kind string
		var size int
		switch x := x.(type) {
		case starlark.String:
			kind, size = "string", len(x)
		case starlark.Bytes:
			kind, size = "bytes", len(x)
		case *starlark.List:
			kind, size = "list", x.Len()
		case starlark.Tuple:
			kind, size = "tuple", len(x)
		default:
			return nil
		}
		hi, lo := bits.Mul64(uint64(size), uint64(count))
		total := int64(lo)
		if hi != 0 || total < 0 {
			total = 1<<63 - 1
		}
		return sized(th, name, kind, total)
	case syntax.PERCENT:
		if f, ok := x.(starlark.String); ok {
			lim := limitsOf(th)
			n, err := interpSize(string(f), y, int64(lim.MaxAllocBytes))
			return textLimit(th, lim, name, n, err)
		}
	case syntax.PIPE, syntax.CIRCUMFLEX, syntax.AMP:
		// Union, symmetric difference, intersection: a copy of x, each
		// element of y hashed.
		switch x := x.(type) {
		case *starlark.Dict:
			if y, ok := y.(*starlark.Dict); ok && op == syntax.PIPE {
				if err := sized(th, name, "dict", int64(x.Len())+int64(y.Len())); err != nil {
					return err
				}
				return checkInsertAll(th, name, false, x, y)
			}
		case *starlark.Set:
			if y, ok := y.(*starlark.Set); ok {
				if op == syntax.AMP {
					return checkInsertAll(th, name, false, y)
				}
				if err := sized(th, name, "set", int64(x.Len())+int64(y.Len())); err != nil {
					return err
				}
				return checkInsertAll(th, name, false, x, y)
			}
		}
	case syntax.LTLT:
		if xi, ok := x.(starlark.Int); ok {
			if yi, ok := y.(starlark.Int); ok {
				if n, ok := yi.Int64(); ok && n > 0 && n < 1<<20 {
					return intResult(th, name, intBits(xi)+n)
				}
			}
		}
	}
	return nil
}

// intResult refuses an int of more than MaxIntBits bits: multiplying or
// printing such ints takes time no step limit sees.
func intResult(th *starlark.Thread, op string, nbits int64) error {
	if nbits <= 64 {
		return nil
	}
	if nbits > MaxIntBits {
		return tooLarge(op, nbits, "int", MaxIntBits)
	}
	return charge(th, nbits/8)
}

// augGuard is x op= y: a list's += extends it and a dict's |= updates it
// in place, as in the interpreter; other operations are x op y.
func augGuard(op syntax.Token) *starlark.Builtin {
	name := op.String() + "="
	_, guarded := guardedOps[op]
	return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 2 || len(kwargs) != 0 {
			return nil, fmt.Errorf("%s: want 2 operands", name)
		}
		x, y := args[0], args[1]
		switch op {
		case syntax.PLUS:
			if xl, ok := x.(*starlark.List); ok {
				if yi, ok := y.(starlark.Iterable); ok {
					return x, extendList(th, name, xl, yi)
				}
			}
		case syntax.PIPE:
			if xd, ok := x.(*starlark.Dict); ok {
				if yd, ok := y.(*starlark.Dict); ok {
					if err := sized(th, name, "dict", int64(xd.Len())+int64(yd.Len())); err != nil {
						return nil, err
					}
					if err := checkInsertAll(th, name, false, yd); err != nil {
						return nil, err
					}
					for k, v := range yd.Entries() {
						if err := xd.SetKey(k, v); err != nil {
							return nil, fmt.Errorf("cannot apply |= to %s", strings.TrimPrefix(err.Error(), "cannot insert into "))
						}
					}
					return x, nil
				}
			}
		}
		if guarded {
			if err := checkBinary(th, name, op, x, y); err != nil {
				return nil, err
			}
		}
		return starlark.Binary(op, x, y)
	})
}

// extendList appends the elements of y to l, as l += y and l.extend(y).
func extendList(th *starlark.Thread, op string, l *starlark.List, y starlark.Iterable) error {
	if n := starlark.Len(y); n > 0 {
		if err := sized(th, op, "list", int64(l.Len())+int64(n)); err != nil {
			return err
		}
	}
	appendErr := func(err error) error {
		return fmt.Errorf("cannot apply %s to %s", op, strings.TrimPrefix(err.Error(), "cannot append to "))
	}
	if ys, ok := y.(starlark.Indexable); ok { // l += l reads what it grows
		n := ys.Len()
		for i := 0; i < n; i++ {
			if err := l.Append(ys.Index(i)); err != nil {
				return appendErr(err)
			}
		}
		return nil
	}
	it := y.Iterate()
	defer it.Done()
	var v starlark.Value
	for it.Next(&v) {
		if err := l.Append(v); err != nil {
			return appendErr(err)
		}
	}
	return nil
}

// indexGuard is x[i]: Starlark's, except that a key missing from a dict
// is shown in at most a few hundred bytes (Starlark prints all of it).
func indexGuard(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 2 || len(kwargs) != 0 {
		return nil, fmt.Errorf("index: want 2 operands")
	}
	x, y := args[0], args[1]
	switch x := x.(type) {
	case starlark.Mapping: // dict
		if err := checkKey(th, "index", y); err != nil {
			return nil, err
		}
		z, found, err := x.Get(y)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("key %s not in %s", shortRepr(y), x.Type())
		}
		return z, nil
	case starlark.Indexable: // string, list, tuple
		n := x.Len()
		i, err := starlark.AsInt32(y)
		if err != nil {
			return nil, fmt.Errorf("%s index: %s", x.Type(), err)
		}
		orig := i
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			if n == 0 {
				return nil, fmt.Errorf("index %d out of range: empty %s", orig, x.Type())
			}
			return nil, fmt.Errorf("%s index %d out of range [%d:%d]", x.Type(), orig, -n, n-1)
		}
		return x.Index(i), nil
	}
	return nil, fmt.Errorf("unhandled index operation %s[%s]", x.Type(), y.Type())
}

// shortRepr is repr(v) when it is short, else its type and a prefix.
func shortRepr(v starlark.Value) string {
	const max = 200
	if n, err := textSize(v, true, max); err == nil && n <= max {
		return v.String()
	}
	if s, ok := v.(starlark.String); ok {
		cut, _ := CutChars(string(s), max/2)
		return fmt.Sprintf("%s… (a string of %d bytes)", starlark.String(cut).String(), len(s))
	}
	if s, ok := v.(starlark.Sequence); ok {
		return fmt.Sprintf("(a %s of %d elements, too large to show)", v.Type(), s.Len())
	}
	return fmt.Sprintf("(a %s too large to show)", v.Type())
}

// sliceGuard is x[lo:hi:step] (Starlark's slice, whose rules it repeats
// to know the length first).
func sliceGuard(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("slice: want 1 operand")
	}
	var lo, hi, stepV starlark.Value = starlark.None, starlark.None, starlark.None
	for _, kv := range kwargs {
		switch kv[0].(starlark.String) {
		case "lo":
			lo = kv[1]
		case "hi":
			hi = kv[1]
		case "step":
			stepV = kv[1]
		}
	}
	x := args[0]
	sl, ok := x.(starlark.Sliceable)
	if !ok {
		return nil, fmt.Errorf("invalid slice operand %s", x.Type())
	}
	n := sl.Len()
	step := 1
	if stepV != starlark.None {
		var err error
		if step, err = starlark.AsInt32(stepV); err != nil {
			return nil, fmt.Errorf("invalid slice step: %s", err)
		}
		if step == 0 {
			return nil, fmt.Errorf("zero is not a valid slice step")
		}
	}
	var start, end int
	if step > 0 {
		start, end = 0, n
		if err := asIndex(lo, n, &start); err != nil {
			return nil, fmt.Errorf("invalid start index: %s", err)
		}
		start = min(max(start, 0), n)
		if err := asIndex(hi, n, &end); err != nil {
			return nil, fmt.Errorf("invalid end index: %s", err)
		}
		end = min(max(end, 0), n)
		end = max(end, start)
	} else {
		start, end = n-1, -1
		if err := asIndex(lo, n, &start); err != nil {
			return nil, fmt.Errorf("invalid start index: %s", err)
		}
		start = min(start, n-1)
		if err := asIndex(hi, n, &end); err != nil {
			return nil, fmt.Errorf("invalid end index: %s", err)
		}
		end = max(end, -1)
		start = max(start, end)
	}
	var length int64
	if step > 0 {
		length = int64((end - start + step - 1) / step)
	} else {
		length = int64((start - end - step - 1) / -step)
	}
	switch x.(type) {
	case starlark.String, starlark.Bytes:
		if step != 1 { // a step of 1 shares the bytes
			if err := charge(th, length+strHeader); err != nil {
				return nil, err
			}
		}
	case *starlark.List, starlark.Tuple:
		if err := charge(th, length*elemBytes); err != nil {
			return nil, err
		}
	}
	return sl.Slice(start, end, step), nil
}

func asIndex(v starlark.Value, n int, result *int) error {
	if v == nil || v == starlark.None {
		return nil
	}
	i, err := starlark.AsInt32(v)
	if err != nil {
		return err
	}
	if i < 0 {
		i += n
	}
	*result = i
	return nil
}

// starGuard charges the tuple or dict that f(*args) and f(**kwargs) copy
// their argument into.
func starGuard(per int64) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("want 1 operand")
		}
		if n := starlark.Len(args[0]); n > 0 {
			if err := charge(th, int64(n)*per); err != nil {
				return nil, err
			}
		}
		return args[0], nil
	}
}
