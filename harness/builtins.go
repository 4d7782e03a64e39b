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
	if utf8.RuneCountInString(s) <= n {
		return s, nil
	}
	runes := []rune(s)
	m := utf8.RuneCountInString(marker)
	if m >= n {
		marker, m = "", 0
	}
	keep := n - m
	switch side {
	case "start":
		return marker + string(runes[len(runes)-keep:]), nil
	case "middle":
		head := (keep + 1) / 2
		return string(runes[:head]) + marker + string(runes[len(runes)-(keep-head):]), nil
	}
	return string(runes[:keep]) + marker, nil
}

// dedent(s) removes the whitespace common to the start of every non-blank
// line, like Python's textwrap.dedent; blank lines become empty.
func dedentBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s); err != nil {
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

// jsonModule is go.starlark.net's json module with every string result
// bounded by MaxStringBytes.
var jsonModule = func() *starlarkstruct.Module {
	members := starlark.StringDict{}
	for name, v := range starjson.Module.Members {
		orig, ok := v.(*starlark.Builtin)
		if !ok {
			members[name] = v
			continue
		}
		members[name] = starlark.NewBuiltin(orig.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			res, err := orig.CallInternal(th, args, kwargs)
			if err != nil {
				return nil, err
			}
			if s, ok := res.(starlark.String); ok {
				if err := checkStringResult(th, "json."+orig.Name(), len(s)); err != nil {
					return nil, err
				}
			}
			return res, nil
		})
	}
	m := &starlarkstruct.Module{Name: "json", Members: members}
	m.Freeze()
	return m
}()

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
