package harness

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/whalerun/whale/internal/textdist"
	"go.starlark.net/starlark"
)

// Bounded methods: x.name for the names of guardedMethods (rewrite.go)
// and getattr hand out a version of the method that checks and charges
// what the call would make before Starlark's own method runs.

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
