package harness

import (
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/whalerun/whale/internal/textdist"
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

// boundedUniverse replaces Starlark's builtins whose result can be large.
var boundedUniverse = starlark.StringDict{
	"str":       universeWrap("str", strPre(false)),
	"repr":      universeWrap("repr", strPre(true)),
	"print":     universeWrap("print", printPre("print")),
	"fail":      universeWrap("fail", printPre("fail")),
	"int":       universeWrap("int", intPre),
	"list":      universeWrap("list", seqPre("list", "list", elemBytes)),
	"tuple":     universeWrap("tuple", seqPre("tuple", "tuple", elemBytes)),
	"sorted":    starlark.NewBuiltin("sorted", sortedBuiltin),
	"min":       starlark.NewBuiltin("min", minmaxBuiltin),
	"max":       starlark.NewBuiltin("max", minmaxBuiltin),
	"reversed":  universeWrap("reversed", seqPre("reversed", "list", elemBytes)),
	"enumerate": universeWrap("enumerate", seqPre("enumerate", "list", 4*elemBytes)),
	"set":       universeWrap("set", setPre),
	"dict":      universeWrap("dict", dictPre),
	"zip":       universeWrap("zip", zipPre),
	"bytes":     universeWrap("bytes", bytesPre),
	"getattr":   starlark.NewBuiltin("getattr", getattrBuiltin),
}

// A precheck looks at a call's arguments before the builtin runs: it
// returns an error to refuse the call, having charged what it lets
// through.
type precheck func(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error

func universeWrap(name string, pre precheck) *starlark.Builtin {
	orig := starlark.Universe[name].(*starlark.Builtin)
	return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := pre(th, limitsOf(th), args, kwargs); err != nil {
			return nil, err
		}
		return orig.CallInternal(th, args, kwargs)
	})
}

// sized refuses a value of n units of kind made by op above the per-value
// limit, and charges what it lets through.
func sized(th *starlark.Thread, op, kind string, n int64) error {
	if err := checkSize(limitsOf(th), op, kind, n); err != nil {
		return err
	}
	return charge(th, bytesOf(kind, n))
}

// textLimit checks the bound of a text about to be made by op (an
// estimate, which stops counting past the limit).
func textLimit(th *starlark.Thread, lim *Options, op string, n int64, err error) error {
	if err != nil {
		return err
	}
	if max := int64(lim.MaxAllocBytes); n > max {
		return memoryError("%s would make a string of more than %d bytes, the limit on one value (MaxAllocBytes)", op, max)
	}
	return charge(th, n+strHeader)
}

func strPre(repr bool) precheck {
	op := "str"
	if repr {
		op = "repr"
	}
	return func(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
		if len(args) != 1 || len(kwargs) != 0 {
			return nil // the builtin reports it
		}
		if _, ok := args[0].(starlark.String); ok && !repr {
			return nil
		}
		n, err := textSize(args[0], repr, int64(lim.MaxAllocBytes))
		return textLimit(th, lim, op, n, err)
	}
}

// printPre bounds print(*args, sep=" ") and fail(*args, sep=" "), which
// make the whole text before printing or failing with it.
func printPre(name string) precheck {
	return func(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
		max := int64(lim.MaxAllocBytes)
		var n int64
		for _, kv := range kwargs {
			if s, ok := kv[1].(starlark.String); ok {
				n += int64(len(s)) * int64(len(args))
			}
		}
		for _, a := range args {
			m, err := textSize(a, false, max-n)
			if err != nil {
				return err
			}
			if n += m; n > max {
				break
			}
		}
		return textLimit(th, lim, name, n, nil)
	}
}

func intPre(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
	if len(args) > 0 {
		if s, ok := args[0].(starlark.String); ok && len(s) > maxIntDigits {
			return fmt.Errorf("int: a string of %d characters is more than the limit of %d digits (converting it would take time quadratic in its length)", len(s), maxIntDigits)
		}
	}
	return nil
}

// seqPre bounds a builtin that makes one element (or entry) of kind per
// element of its first argument.
func seqPre(name, kind string, per int64) precheck {
	return func(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
		if len(args) == 0 {
			return nil
		}
		n := int64(starlark.Len(args[0]))
		if n <= 0 {
			return nil
		}
		if err := checkSize(lim, name+"()", kind, n); err != nil {
			return err
		}
		return charge(th, n*per)
	}
}

func dictPre(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
	n := int64(len(kwargs))
	if len(args) > 0 {
		n += int64(max(starlark.Len(args[0]), 0))
	}
	if err := checkSize(lim, "dict()", "dict", n); err != nil {
		return err
	}
	if err := charge(th, n*entryBytes); err != nil {
		return err
	}
	if len(args) == 1 {
		return checkInsertAll(th, "dict()", true, args[0])
	}
	return nil
}

// setPre bounds set(iterable): its size, and hashing its elements.
func setPre(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
	if err := seqPre("set", "set", entryBytes)(th, lim, args, kwargs); err != nil {
		return err
	}
	if len(args) == 1 && len(kwargs) == 0 {
		return checkInsertAll(th, "set()", false, args[0])
	}
	return nil
}

func zipPre(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
	if len(args) == 0 {
		return nil
	}
	n := int64(-1)
	for _, a := range args {
		l := int64(starlark.Len(a))
		if l < 0 {
			continue
		}
		if n < 0 || l < n {
			n = l
		}
	}
	if n <= 0 {
		return nil
	}
	if err := checkSize(lim, "zip()", "list", n); err != nil {
		return err
	}
	return charge(th, n*elemBytes*int64(2+len(args)))
}

func bytesPre(th *starlark.Thread, lim *Options, args starlark.Tuple, kwargs []starlark.Tuple) error {
	if len(args) != 1 {
		return nil
	}
	n := int64(starlark.Len(args[0]))
	if s, ok := args[0].(starlark.String); ok {
		n = int64(len(s))
	}
	if n <= 0 {
		return nil
	}
	return sized(th, "bytes()", "bytes", n)
}

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

// attrGuard is x.name for the names of guardedMethods.
func attrGuard(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 2 || len(kwargs) != 0 {
		return nil, fmt.Errorf("getattr: want 2 operands")
	}
	name, _ := starlark.AsString(args[1])
	return boundedAttr(args[0], name)
}

// getattrBuiltin is getattr(x, name[, default]) with bounded methods.
func getattrBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		x, dflt starlark.Value
		name    string
	)
	if err := starlark.UnpackPositionalArgs("getattr", args, kwargs, 2, &x, &name, &dflt); err != nil {
		return nil, err
	}
	v, err := boundedAttr(x, name)
	if err != nil {
		if dflt != nil {
			return dflt, nil
		}
		return nil, fmt.Errorf("getattr: %v", err)
	}
	return v, nil
}

// boundedAttr is x.name (Starlark's getAttr, messages included), with the
// methods of methodChecks bounded.
func boundedAttr(x starlark.Value, name string) (starlark.Value, error) {
	ha, ok := x.(starlark.HasAttrs)
	if !ok {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	v, err := ha.Attr(name)
	if err != nil {
		if nsa, ok := err.(starlark.NoSuchAttrError); ok {
			return nil, fmt.Errorf("%s%s", string(nsa), spellHint(name, ha.AttrNames()))
		}
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%s has no .%s field or method%s", x.Type(), name, spellHint(name, ha.AttrNames()))
	}
	m, ok := v.(*starlark.Builtin)
	if !ok || m.Receiver() == nil {
		return v, nil
	}
	var check methodCheck
	switch x.(type) {
	case starlark.String:
		check = stringChecks[name]
	case *starlark.List:
		check = listChecks[name]
	case *starlark.Dict:
		check = dictChecks[name]
	case *starlark.Set:
		check = setChecks[name]
	}
	if check == nil {
		return v, nil
	}
	return starlark.NewBuiltin(m.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := check(th, limitsOf(th), x, args, kwargs); err != nil {
			return nil, err
		}
		return m.CallInternal(th, args, kwargs)
	}).BindReceiver(x), nil
}

func spellHint(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := textdist.Levenshtein(name, n); d < bestD && d < len(name) {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean .%s?)", best)
}

// A methodCheck bounds a method call on receiver x.
type methodCheck func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error

// arg is the i'th positional argument or the keyword argument name.
func arg(args starlark.Tuple, kwargs []starlark.Tuple, i int, name string) starlark.Value {
	if i < len(args) {
		return args[i]
	}
	for _, kv := range kwargs {
		if s, ok := kv[0].(starlark.String); ok && string(s) == name {
			return kv[1]
		}
	}
	return nil
}

func intArg(v starlark.Value, dflt int64) int64 {
	if v == nil || v == starlark.None {
		return dflt
	}
	if i, ok := v.(starlark.Int); ok {
		if n, ok := i.Int64(); ok {
			return n
		}
	}
	return dflt
}

var stringChecks = map[string]methodCheck{
	"join": func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		it, ok := arg(args, kwargs, 0, "iterable").(starlark.Iterable)
		if !ok {
			return nil
		}
		sep := int64(len(x.(starlark.String)))
		max := int64(lim.MaxAllocBytes)
		var n int64
		each := func(v starlark.Value) bool {
			if s, ok := v.(starlark.String); ok {
				n += int64(len(s)) + sep
			}
			return n <= max
		}
		if seq, ok := it.(starlark.Indexable); ok {
			for i := 0; i < seq.Len() && each(seq.Index(i)); i++ {
			}
		} else {
			iter := it.Iterate()
			var v starlark.Value
			for iter.Next(&v) && each(v) {
			}
			iter.Done()
		}
		return textLimit(th, lim, "join", n, nil)
	},
	"format": func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		n, err := formatSize(string(x.(starlark.String)), args, kwargs, int64(lim.MaxAllocBytes))
		return textLimit(th, lim, "format", n, err)
	},
	"replace": func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		s := string(x.(starlark.String))
		old, ok1 := arg(args, kwargs, 0, "old").(starlark.String)
		repl, ok2 := arg(args, kwargs, 1, "new").(starlark.String)
		if !ok1 || !ok2 {
			return nil
		}
		n := int64(len(s))
		if len(repl) > len(old) {
			var k int64
			if old == "" {
				k = int64(utf8.RuneCountInString(s)) + 1
			} else {
				k = int64(strings.Count(s, string(old)))
			}
			if c := intArg(arg(args, kwargs, 2, "count"), -1); c >= 0 {
				k = min(k, c)
			}
			n += k * int64(len(repl)-len(old))
		}
		return textLimit(th, lim, "replace", n, nil)
	},
	"split":      splitCheck,
	"rsplit":     splitCheck,
	"splitlines": splitCheck,
	"upper":      caseCheck,
	"lower":      caseCheck,
	"title":      caseCheck,
	"capitalize": caseCheck,
}

// splitCheck bounds the pieces of s.split(sep, maxsplit), s.rsplit and
// s.splitlines (which splits at "\n").
func splitCheck(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
	s := string(x.(starlark.String))
	var pieces int64
	sepV := arg(args, kwargs, 0, "sep")
	if sep, ok := sepV.(starlark.String); ok && sep != "" {
		pieces = int64(strings.Count(s, string(sep))) + 1
	} else if _, isBool := sepV.(starlark.Bool); isBool || sepV == nil || sepV == starlark.None {
		// Whitespace (and, for splitlines, "\n"): at most one piece more
		// than there are bytes that can begin a separator.
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c >= 0x80 {
				pieces++
			}
		}
		pieces++
	}
	if m := intArg(arg(args, kwargs, 1, "maxsplit"), -1); m >= 0 {
		pieces = min(pieces, m+1)
	}
	if err := checkSize(lim, "split", "list", pieces); err != nil {
		return err
	}
	return charge(th, pieces*(elemBytes+strHeader))
}

// caseCheck charges s.upper() and its kind: a case change makes a copy
// at most half again as long.
func caseCheck(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
	return charge(th, int64(len(x.(starlark.String)))*3/2+strHeader)
}

var listChecks = map[string]methodCheck{
	"extend": func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		if n := starlark.Len(arg(args, kwargs, 0, "iterable")); n > 0 {
			return sized(th, "extend", "list", int64(x.(*starlark.List).Len())+int64(n))
		}
		return nil
	},
	"index":  memberCheck("index"),
	"remove": memberCheck("remove"),
}

var dictChecks = map[string]methodCheck{
	"update": func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		n := int64(len(kwargs))
		if len(args) > 0 {
			n += int64(max(starlark.Len(args[0]), 0))
		}
		if err := sized(th, "update", "dict", int64(x.(*starlark.Dict).Len())+n); err != nil {
			return err
		}
		if len(args) == 1 {
			return checkInsertAll(th, "update", true, args[0])
		}
		return nil
	},
	"items":      dictViewCheck("items", 4*elemBytes),
	"keys":       dictViewCheck("keys", elemBytes),
	"values":     dictViewCheck("values", elemBytes),
	"get":        keyArgCheck("get"),
	"setdefault": keyArgCheck("setdefault"),
	"pop":        keyArgCheck("pop"),
}

// dictViewCheck bounds d.items(), d.keys() and d.values(), lists as long
// as the dict.
func dictViewCheck(name string, per int64) methodCheck {
	return func(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
		n := int64(x.(*starlark.Dict).Len())
		if err := checkSize(lim, name, "list", n); err != nil {
			return err
		}
		return charge(th, n*per)
	}
}

var setChecks = map[string]methodCheck{
	"union":                setOpCheck,
	"symmetric_difference": setOpCheck,
	"difference":           setOpCheck,
	"intersection":         setOpCheck,
	"update":               setOpCheck,
	"issubset":             setTestCheck,
	"issuperset":           setTestCheck,
	"add":                  keyArgCheck("add"),
	"discard":              keyArgCheck("discard"),
	"remove":               keyArgCheck("remove"),
}

// setOpCheck bounds s.union(*others) and its kind by the sum of the
// sizes, and hashing the elements of s (copied) and of the others.
func setOpCheck(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
	n := int64(x.(*starlark.Set).Len())
	for _, a := range args {
		n += int64(max(starlark.Len(a), 0))
	}
	if err := sized(th, "set operation", "set", n); err != nil {
		return err
	}
	return checkInsertAll(th, "set operation", false, append(starlark.Tuple{x}, args...)...)
}

// setTestCheck bounds s.issubset(other) and s.issuperset(other), which
// look each element of other up in s.
func setTestCheck(th *starlark.Thread, lim *Options, x starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) error {
	return checkInsertAll(th, "set operation", false, args...)
}

// interpSize bounds the length of format % x (Starlark's interpolate):
// the format's bytes and, for each conversion, its argument's text.
func interpSize(format string, x starlark.Value, max int64) (int64, error) {
	n := int64(len(format))
	tuple, isTuple := x.(starlark.Tuple)
	next := 0
	for i := 0; i < len(format) && n <= max; i++ {
		if format[i] != '%' {
			continue
		}
		i++
		if i >= len(format) {
			break
		}
		if format[i] == '%' {
			continue
		}
		var a starlark.Value
		if format[i] == '(' {
			j := strings.IndexByte(format[i:], ')')
			if j < 0 {
				break
			}
			if m, ok := x.(starlark.Mapping); ok {
				if v, found, err := m.Get(starlark.String(format[i+1 : i+j])); err == nil && found {
					a = v
				}
			}
			i += j + 1
		} else if isTuple {
			if next < len(tuple) {
				a = tuple[next]
			}
			next++
		} else {
			a = x
		}
		if i >= len(format) || a == nil {
			break // Starlark reports it
		}
		slack := int64(8) // %o of an int, %c
		switch format[i] {
		case 'e', 'E', 'f', 'F', 'g', 'G':
			slack = 330 // %f of 1e308
		}
		m, err := textSize(a, format[i] != 's', max-n)
		if err != nil {
			return 0, err
		}
		n += m + slack
	}
	return n, nil
}

// formatSize bounds the length of format.format(*args, **kwargs): the
// format's bytes and, for each replacement field, its argument's text.
func formatSize(format string, args starlark.Tuple, kwargs []starlark.Tuple, max int64) (int64, error) {
	n := int64(len(format))
	auto := 0
	for i := 0; i < len(format) && n <= max; i++ {
		if format[i] != '{' {
			continue
		}
		if i+1 < len(format) && format[i+1] == '{' {
			i++
			continue
		}
		j := strings.IndexByte(format[i:], '}')
		if j < 0 {
			break
		}
		field := format[i+1 : i+j]
		i += j
		name, conv := field, ""
		if k := strings.IndexAny(field, "!:"); k >= 0 {
			name = field[:k]
			if field[k] == '!' {
				conv = field[k+1:]
			}
		}
		var a starlark.Value
		switch {
		case name == "":
			if auto < len(args) {
				a = args[auto]
			}
			auto++
		case name[0] >= '0' && name[0] <= '9':
			k := 0
			for _, c := range name {
				if c < '0' || c > '9' || k > 1<<20 {
					k = -1
					break
				}
				k = k*10 + int(c-'0')
			}
			if k >= 0 && k < len(args) {
				a = args[k]
			}
		default:
			for _, kv := range kwargs {
				if s, ok := kv[0].(starlark.String); ok && string(s) == name {
					a = kv[1]
				}
			}
		}
		if a == nil {
			continue // Starlark reports it
		}
		m, err := textSize(a, conv == "r", max-n)
		if err != nil {
			return 0, err
		}
		n += m
	}
	return n, nil
}
