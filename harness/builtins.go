package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	starjson "go.starlark.net/lib/json"
	starmath "go.starlark.net/lib/math"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// builtinNames are the names the runtime predeclares for every harness, on
// top of Starlark's universe (len, str, dict, ...). Contracts may not reuse
// them.
var builtinNames = []string{"re", "json", "math", "truncate", "dedent", "range", "defaults"}

var reservedNames = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range builtinNames {
		m[n] = true
	}
	for n := range starlark.Universe {
		m[n] = true
	}
	return m
}()

func sortStrings(s []string) { sort.Strings(s) }

// limitsOf returns the options of the call running on th.
func limitsOf(th *starlark.Thread) *Options {
	if r, ok := th.Local(localCall).(*runner); ok && r.opts != nil {
		return r.opts
	}
	o := Options{}.withDefaults()
	return &o
}

// ctxOf returns the context of the call running on th.
func ctxOf(th *starlark.Thread) context.Context {
	if r, ok := th.Local(localCall).(*runner); ok && r.parent != nil {
		return r.context()
	}
	return context.Background()
}

func checkStringResult(th *starlark.Thread, what string, n int) error {
	if max := limitsOf(th).MaxStringBytes; n > max {
		return fmt.Errorf("%s: result of %d bytes is more than the limit of %d", what, n, max)
	}
	return nil
}

// makePredeclared builds what the harness's code sees besides Starlark's
// universe: the runtime's builtins, the contract's helpers, its constants'
// defaults (so hooks may read a constant the harness leaves out) and the
// defaults module (so a hook may wrap the default it replaces).
func (h *Harness) makePredeclared() (starlark.StringDict, error) {
	d := starlark.StringDict{
		"re":       reModule,
		"json":     jsonModule,
		"math":     starmath.Module,
		"truncate": starlark.NewBuiltin("truncate", truncateBuiltin),
		"dedent":   starlark.NewBuiltin("dedent", dedentBuiltin),
		"range":    starlark.NewBuiltin("range", boundedRange),
	}
	// Starlark's builtins that can make large values, bounded, and the
	// hidden guards that the rewritten code calls (rewrite.go).
	maps.Copy(d, boundedUniverse)
	maps.Copy(d, guardBuiltins)
	defaults := starlark.StringDict{}
	for _, k := range h.contract.Constants {
		v, err := ToStarlark(k.Default)
		if err != nil {
			return nil, fmt.Errorf("constant %s: default: %w", k.Name, err)
		}
		d[k.Name] = v
		defaults[k.Name] = v
	}
	for _, spec := range h.contract.Hooks {
		defaults[spec.Name] = h.defaultBuiltin(spec)
	}
	d["defaults"] = &starlarkstruct.Module{Name: "defaults", Members: defaults}
	for _, name := range slices.Sorted(maps.Keys(h.contract.Helpers)) {
		d[name] = helperBuiltin(name, h.contract.Helpers[name])
	}
	d.Freeze()
	return d, nil
}

// defaultBuiltin exposes a hook's Go default to harness code as
// defaults.<hook>, so that a harness can change one thing about it.
func (h *Harness) defaultBuiltin(spec HookSpec) *starlark.Builtin {
	return starlark.NewBuiltin(spec.Name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if h.globals == nil {
			return nil, fmt.Errorf("defaults.%s cannot be called while the module loads", spec.Name)
		}
		goArgs, err := unpackGo(th, b, args, kwargs, spec.Params)
		if err != nil {
			return nil, err
		}
		lim := limitsOf(th)
		res, err := spec.Default(ctxOf(th), h, goArgs)
		if err != nil {
			return nil, err
		}
		return toStarlark(res, newBudget(lim.MaxValueBytes, lim.MaxValueItems), 0)
	})
}

func helperBuiltin(name string, hb Builtin) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		goArgs, err := unpackGo(th, b, args, kwargs, hb.Params)
		if err != nil {
			return nil, err
		}
		lim := limitsOf(th)
		ctx := ctxOf(th)
		res, err := hb.Fn(ctx, goArgs)
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			return nil, err
		}
		v, err := toStarlark(res, newBudget(lim.MaxValueBytes, lim.MaxValueItems), 0)
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		return v, nil
	})
}

var universeRange = starlark.Universe["range"].(*starlark.Builtin)

// boundedRange is range() with a cap on its length: iterating a range takes
// steps, but list(range(n)) would allocate n values in one step.
func boundedRange(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	v, err := universeRange.CallInternal(th, args, kwargs)
	if err != nil {
		return nil, err
	}
	if max := limitsOf(th).MaxRange; v.(starlark.Sequence).Len() > max {
		return nil, fmt.Errorf("a range of %d elements is more than the limit of %d", v.(starlark.Sequence).Len(), max)
	}
	return v, nil
}

// truncate(s, n, marker="…", side="end") shortens s to at most n characters
// (code points, never splitting one), marker included: side "end" keeps the
// start, "start" keeps the end, "middle" keeps both ends.
func truncateBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		s      string
		n      int
		marker = "…"
		side   = "end"
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s, "n", &n, "marker?", &marker, "side?", &side); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("truncate: n must be >= 0, got %d", n)
	}
	if err := charge(th, int64(min(len(s), 4*n+len(marker)))); err != nil {
		return nil, err
	}
	out, err := truncate(s, n, marker, side)
	if err != nil {
		return nil, fmt.Errorf("truncate: %w", err)
	}
	return starlark.String(out), nil
}

func truncate(s string, n int, marker, side string) (string, error) {
	switch side {
	case "end", "start", "middle":
	default:
		return "", fmt.Errorf(`side must be "end", "start" or "middle", got %q`, side)
	}
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s, nil
	}
	m := utf8.RuneCountInString(marker)
	if m >= n {
		marker, m = "", 0
	}
	keep := n - m
	// Byte offsets of rune counts, without converting s to runes (four
	// bytes a character).
	head := func(k int) string { cut, _ := CutChars(s, k); return cut }
	tail := func(k int) string { return s[len(head(total-k)):] }
	switch side {
	case "start":
		return marker + tail(keep), nil
	case "middle":
		h := (keep + 1) / 2
		return head(h) + marker + tail(keep-h), nil
	}
	return head(keep) + marker, nil
}

// dedent(s) removes the whitespace common to the start of every non-blank
// line, like Python's textwrap.dedent; blank lines become empty.
func dedentBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s); err != nil {
		return nil, err
	}
	lines := int64(strings.Count(s, "\n")) + 1
	if err := checkSize(limitsOf(th), "dedent", "list", lines); err != nil {
		return nil, err
	}
	if err := charge(th, int64(len(s))+strHeader*lines); err != nil {
		return nil, err
	}
	return starlark.String(dedent(s)), nil
}

func dedent(s string) string {
	lines := strings.Split(s, "\n")
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = indent, false
			continue
		}
		for !strings.HasPrefix(indent, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			lines[i] = ""
		} else {
			lines[i] = l[len(prefix):]
		}
	}
	return strings.Join(lines, "\n")
}

// jsonModule is go.starlark.net's json module, bounded: json.decode reads
// at most MaxNesting levels, numbers of at most maxIntDigits digits and
// as many values as a list may hold; json.encode, encode_indent and indent
// check the size of their text before making it, and every string result
// is bounded by MaxStringBytes.
var jsonModule = func() *starlarkstruct.Module {
	orig := func(name string) *starlark.Builtin { return starjson.Module.Members[name].(*starlark.Builtin) }
	encode, decode, indent := orig("encode"), orig("decode"), orig("indent")
	bounded := func(name string, fn func(th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
		return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			res, err := fn(th, args, kwargs)
			if err != nil {
				return nil, err
			}
			if s, ok := res.(starlark.String); ok {
				if err := checkStringResult(th, name, len(s)); err != nil {
					return nil, err
				}
			}
			return res, nil
		})
	}
	doEncode := func(th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) == 1 && len(kwargs) == 0 {
			lim := limitsOf(th)
			n, err := jsonSize(args[0], int64(lim.MaxAllocBytes))
			if err := textLimit(th, lim, "json.encode", n, err); err != nil {
				return nil, err
			}
		}
		return encode.CallInternal(th, args, kwargs)
	}
	doIndent := func(th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) == 1 {
			if s, ok := args[0].(starlark.String); ok {
				prefix, _ := starlark.AsString(arg(nil, kwargs, 0, "prefix"))
				ind, ok := starlark.AsString(arg(nil, kwargs, 0, "indent"))
				if !ok {
					ind = "\t"
				}
				lim := limitsOf(th)
				if err := textLimit(th, lim, "json.indent", indentSize(string(s), len(prefix), len(ind)), nil); err != nil {
					return nil, err
				}
			}
		}
		return indent.CallInternal(th, args, kwargs)
	}
	members := starlark.StringDict{
		"encode": bounded("json.encode", doEncode),
		"indent": bounded("json.indent", doIndent),
		"encode_indent": bounded("json.encode_indent", func(th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var (
				x              starlark.Value
				prefix, indent = "", "\t"
			)
			if err := starlark.UnpackArgs("json.encode_indent", args, kwargs, "x", &x, "prefix?", &prefix, "indent?", &indent); err != nil {
				return nil, err
			}
			s, err := doEncode(th, starlark.Tuple{x}, nil)
			if err != nil {
				return nil, err
			}
			return doIndent(th, starlark.Tuple{s}, []starlark.Tuple{{starlark.String("prefix"), starlark.String(prefix)}, {starlark.String("indent"), starlark.String(indent)}})
		}),
		"decode": bounded("json.decode", func(th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			if len(args) >= 1 {
				if s, ok := args[0].(starlark.String); ok {
					if err := checkJSONInput(th, string(s)); err != nil {
						return nil, err
					}
				}
			}
			return decode.CallInternal(th, args, kwargs)
		}),
	}
	m := &starlarkstruct.Module{Name: "json", Members: members}
	m.Freeze()
	return m
}()

// jsonScanner reads a JSON text a byte at a time, skipping the insides of
// strings (escapes included): what json.decode's and json.indent's bounds
// count is the structure outside them. It is the one scanner of both, so
// their idea of where a string ends cannot differ.
type jsonScanner struct {
	s string
	i int
}

// next returns the next byte outside a string ('"' for a whole string),
// or false at the end of the text.
func (sc *jsonScanner) next() (byte, bool) {
	if sc.i >= len(sc.s) {
		return 0, false
	}
	c := sc.s[sc.i]
	sc.i++
	if c != '"' {
		return c, true
	}
	for sc.i < len(sc.s) {
		j := strings.IndexAny(sc.s[sc.i:], `"\`)
		if j < 0 {
			sc.i = len(sc.s)
			break
		}
		sc.i += j + 1
		if sc.s[sc.i-1] == '"' {
			break
		}
		sc.i++ // the escaped byte
	}
	return '"', true
}

// checkJSONInput looks at a JSON text before json.decode reads it:
// Starlark's decoder recurses once per level of nesting (5M brackets
// overflowed the stack, which kills the process), converts a number of n
// digits in time quadratic in n, and makes a value per element.
func checkJSONInput(th *starlark.Thread, s string) error {
	lim := limitsOf(th)
	depth, values, digits := 0, int64(1), 0
	sc := jsonScanner{s: s}
	for {
		c, ok := sc.next()
		if !ok {
			break
		}
		if c >= '0' && c <= '9' {
			if digits++; digits > maxIntDigits {
				return fmt.Errorf("json.decode: a number of more than %d digits (converting it would take time quadratic in its length)", maxIntDigits)
			}
			continue
		}
		digits = 0
		switch c {
		case '[', '{':
			if depth++; depth > MaxNesting {
				return memoryError("json.decode: input nested deeper than %d levels (MaxNesting)", MaxNesting)
			}
			values++
		case ']', '}':
			depth--
		case ',', ':':
			values++
		}
	}
	if err := checkSize(lim, "json.decode", "list", values); err != nil {
		return err
	}
	return charge(th, int64(len(s))+values*2*elemBytes)
}

// indentSize bounds the length of json.indent(s) with a prefix and an
// indent of the given lengths: a line break, the prefix and the
// indentation after every bracket and comma, a space after every colon.
func indentSize(s string, prefix, indent int) int64 {
	n := int64(len(s))
	var depth int64
	sc := jsonScanner{s: s}
	for {
		c, ok := sc.next()
		if !ok {
			break
		}
		switch c {
		case '[', '{':
			depth++
			n += 2 + int64(prefix) + depth*int64(indent)
		case ']', '}':
			depth = max(depth-1, 0)
			n += 1 + int64(prefix) + depth*int64(indent)
		case ',':
			n += 1 + int64(prefix) + depth*int64(indent)
		case ':':
			n++
		}
	}
	return n
}

// unpackGo binds a builtin's arguments to params, by position or name, and
// converts them to Go values within the thread's size limits.
func unpackGo(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple, params []string) ([]any, error) {
	vals := make([]starlark.Value, len(params))
	pairs := make([]any, 0, 2*len(params))
	for i, p := range params {
		pairs = append(pairs, p, &vals[i])
	}
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, pairs...); err != nil {
		return nil, err
	}
	lim := limitsOf(th)
	bud := newBudget(lim.MaxValueBytes, lim.MaxValueItems)
	goArgs := make([]any, len(vals))
	for i, v := range vals {
		gv, err := fromStarlark(v, bud, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", params[i], err)
		}
		goArgs[i] = gv
	}
	return goArgs, nil
}

// CutChars keeps the first n characters (runes) of s and says whether it
// cut: what the limits in characters that harnesses and domains set mean.
func CutChars(s string, n int) (string, bool) {
	if n <= 0 {
		return "", s != ""
	}
	if len(s) <= n {
		return s, false
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos], true
		}
		i++
	}
	return s, false
}
