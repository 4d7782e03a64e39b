package harness

import (
	"fmt"

	"go.starlark.net/starlark"
)

// Bounded versions of Starlark's builtins (str, list, dict, zip, ...):
// each looks at its arguments, refuses or charges what the call would
// make, then runs Starlark's own builtin (see guards.go).

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
