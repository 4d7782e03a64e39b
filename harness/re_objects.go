package harness

import (
	"fmt"
	"regexp"
	"slices"
	"sync/atomic"

	"go.starlark.net/starlark"
)

// rePattern is a compiled regular expression, from re.compile.
type rePattern struct {
	rx    *regexp.Regexp
	src   string
	flags int
	insts int // the compiled program's instructions (progSize)
	// methods holds the bound methods made so far, by patternMethodNames
	// index: a pattern is mostly a frozen global whose methods every hook
	// call looks up again.
	methods [len(patternMethodNames)]atomic.Pointer[starlark.Builtin]
}

var _ starlark.HasAttrs = (*rePattern)(nil)

func (p *rePattern) String() string        { return fmt.Sprintf("re.compile(%q)", p.src) }
func (p *rePattern) Type() string          { return "re.Pattern" }
func (p *rePattern) Freeze()               {}
func (p *rePattern) Truth() starlark.Bool  { return true }
func (p *rePattern) Hash() (uint32, error) { return starlark.String(p.src).Hash() }

func (p *rePattern) variant(fn string, mode reMode) (*regexp.Regexp, error) {
	if mode == modeSearch {
		return p.rx, nil
	}
	v, err := compileRE(fn, p.src, p.flags, mode)
	if err != nil {
		return nil, err
	}
	return v.rx, nil
}

var patternMethods = map[string]reOp{
	"search":    reSearch(modeSearch),
	"match":     reSearch(modeMatch),
	"fullmatch": reSearch(modeFull),
	"findall":   reFindall,
	"finditer":  reFinditer,
	"split":     reSplit,
	"sub":       reSub,
}

// patternMethodNames are patternMethods' keys, in a fixed order.
var patternMethodNames = [...]string{"search", "match", "fullmatch", "findall", "finditer", "split", "sub"}

func (p *rePattern) Attr(name string) (starlark.Value, error) {
	switch name {
	case "pattern":
		return starlark.String(p.src), nil
	case "flags":
		return starlark.MakeInt(p.flags), nil
	case "groups":
		return starlark.MakeInt(p.rx.NumSubexp()), nil
	}
	i := slices.Index(patternMethodNames[:], name)
	if i < 0 {
		return nil, nil
	}
	if b := p.methods[i].Load(); b != nil {
		return b, nil
	}
	op := patternMethods[name]
	fn := "re.Pattern." + name
	b := starlark.NewBuiltin(fn, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return op(th, fn, p, args, kwargs)
	})
	// Concurrent calls may both make one; either serves.
	p.methods[i].CompareAndSwap(nil, b)
	return p.methods[i].Load(), nil
}

func (p *rePattern) AttrNames() []string {
	names := []string{"pattern", "flags", "groups"}
	for n := range patternMethods {
		names = append(names, n)
	}
	sortStrings(names)
	return names
}

// reMatch is the result of a successful search: Python's Match object, with
// group, groups, groupdict, start, end and span, and m[g] for m.group(g).
type reMatch struct {
	p   *rePattern
	s   string
	idx []int
}

var (
	_ starlark.HasAttrs = (*reMatch)(nil)
	_ starlark.Mapping  = (*reMatch)(nil)
)

func (m *reMatch) String() string {
	return fmt.Sprintf("<re.Match span=(%d, %d) match=%q>", m.idx[0], m.idx[1], m.s[m.idx[0]:m.idx[1]])
}
func (m *reMatch) Type() string          { return "re.Match" }
func (m *reMatch) Freeze()               {}
func (m *reMatch) Truth() starlark.Bool  { return true }
func (m *reMatch) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: re.Match") }

// Get implements m[g].
func (m *reMatch) Get(k starlark.Value) (starlark.Value, bool, error) {
	g, err := m.groupIndex(k)
	if err != nil {
		return nil, false, err
	}
	return m.groupValue(g), true, nil
}

func (m *reMatch) groupIndex(k starlark.Value) (int, error) {
	switch x := k.(type) {
	case starlark.Int:
		g, ok := x.Int64()
		if !ok || g < 0 || int(g) > m.p.rx.NumSubexp() {
			return 0, fmt.Errorf("no such group: %s", x)
		}
		return int(g), nil
	case starlark.String:
		g := m.p.rx.SubexpIndex(string(x))
		if g < 0 {
			return 0, fmt.Errorf("no such group: %q", string(x))
		}
		return g, nil
	}
	return 0, fmt.Errorf("group must be an int or a string, got %s", k.Type())
}

func (m *reMatch) groupValue(g int) starlark.Value {
	if m.idx[2*g] < 0 {
		return starlark.None
	}
	return starlark.String(m.s[m.idx[2*g]:m.idx[2*g+1]])
}

var matchMethods = []string{"end", "group", "groupdict", "groups", "span", "start"}

func (m *reMatch) AttrNames() []string { return append([]string{"string"}, matchMethods...) }

func (m *reMatch) Attr(name string) (starlark.Value, error) {
	if name == "string" {
		return starlark.String(m.s), nil
	}
	var impl func(fn string, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)
	switch name {
	case "group":
		// The common case, bound without a closure.
		return matchGroup.BindReceiver(m), nil
	case "groups":
		impl = m.groups
	case "groupdict":
		impl = m.groupdict
	case "start", "end", "span":
		impl = func(fn string, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var gv starlark.Value = starlark.MakeInt(0)
			if err := starlark.UnpackArgs(fn, args, kwargs, "group?", &gv); err != nil {
				return nil, err
			}
			g, err := m.groupIndex(gv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", fn, err)
			}
			start, end := starlark.MakeInt(m.idx[2*g]), starlark.MakeInt(m.idx[2*g+1])
			switch name {
			case "start":
				return start, nil
			case "end":
				return end, nil
			}
			return starlark.Tuple{start, end}, nil
		}
	default:
		return nil, nil
	}
	fn := "re.Match." + name
	return starlark.NewBuiltin(fn, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return impl(fn, args, kwargs)
	}), nil
}

var matchGroup = starlark.NewBuiltin("re.Match.group", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return b.Receiver().(*reMatch).group(b.Name(), args, kwargs)
})

func (m *reMatch) group(fn string, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("%s: unexpected keyword arguments", fn)
	}
	switch len(args) {
	case 0:
		return m.groupValue(0), nil
	case 1:
		g, err := m.groupIndex(args[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
		return m.groupValue(g), nil
	}
	out := make(starlark.Tuple, len(args))
	for i, a := range args {
		g, err := m.groupIndex(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
		out[i] = m.groupValue(g)
	}
	return out, nil
}

func (m *reMatch) groups(fn string, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var def starlark.Value = starlark.None
	if err := starlark.UnpackArgs(fn, args, kwargs, "default?", &def); err != nil {
		return nil, err
	}
	out := make(starlark.Tuple, m.p.rx.NumSubexp())
	for g := 1; g <= len(out); g++ {
		if m.idx[2*g] < 0 {
			out[g-1] = def
		} else {
			out[g-1] = m.groupValue(g)
		}
	}
	return out, nil
}

func (m *reMatch) groupdict(fn string, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var def starlark.Value = starlark.None
	if err := starlark.UnpackArgs(fn, args, kwargs, "default?", &def); err != nil {
		return nil, err
	}
	d := starlark.NewDict(m.p.rx.NumSubexp())
	for g, name := range m.p.rx.SubexpNames() {
		if g == 0 || name == "" {
			continue
		}
		v := m.groupValue(g)
		if v == starlark.None {
			v = def
		}
		_ = d.SetKey(starlark.String(name), v)
	}
	return d, nil
}
