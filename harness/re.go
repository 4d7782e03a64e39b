package harness

import (
	"errors"
	"fmt"
	"regexp"
	resyntax "regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// The re module: Python's re API over Go's regexp (RE2). Matching takes time
// linear in the input whatever the pattern; the price is no backreferences
// and no lookaround, which fail to compile with an error saying so. Offsets
// (start, end, span) are byte offsets, like Starlark string indices. Empty
// matches directly after a match are skipped (Go's rule), which differs from
// Python 3.7+ in split and sub on patterns that can match empty.

// Python's flag values, so that code written for Python runs unchanged.
const (
	reIgnoreCase = 2
	reMultiline  = 8
	reDotAll     = 16
	reUnicode    = 32  // accepted, no effect
	reASCII      = 256 // accepted: Go's \d, \w, \s are ASCII already
	reKnownFlags = reIgnoreCase | reMultiline | reDotAll | reUnicode | reASCII
)

const (
	maxPatternBytes = 64 << 10
	maxCachedRE     = 1024
)

type reMode byte

const (
	modeSearch reMode = iota
	modeMatch         // anchored at the start
	modeFull          // anchored at both ends
)

var (
	reCache     sync.Map // reKey → *rePattern, rx compiled for the key's mode
	reCacheSize atomic.Int64
)

type reKey struct {
	pattern string
	flags   int
	mode    reMode
}

// compileRE is the pattern compiled for mode, from reCache when it can.
func compileRE(fn, pattern string, flags int, mode reMode) (*rePattern, error) {
	key := reKey{pattern, flags, mode}
	if v, ok := reCache.Load(key); ok {
		return v.(*rePattern), nil
	}
	if len(pattern) > maxPatternBytes {
		return nil, fmt.Errorf("%s: pattern of %d bytes is more than the limit of %d", fn, len(pattern), maxPatternBytes)
	}
	if flags&^reKnownFlags != 0 {
		return nil, fmt.Errorf("%s: unsupported flags %d (supported: re.I, re.M, re.S)", fn, flags&^reKnownFlags)
	}
	var prefix strings.Builder
	if flags&(reIgnoreCase|reMultiline|reDotAll) != 0 {
		prefix.WriteString("(?")
		if flags&reIgnoreCase != 0 {
			prefix.WriteByte('i')
		}
		if flags&reMultiline != 0 {
			prefix.WriteByte('m')
		}
		if flags&reDotAll != 0 {
			prefix.WriteByte('s')
		}
		prefix.WriteByte(')')
	}
	expr := pattern
	switch mode {
	case modeMatch:
		expr = `\A(?:` + pattern + `)`
	case modeFull:
		expr = `\A(?:` + pattern + `)\z`
	}
	rx, err := regexp.Compile(prefix.String() + expr)
	if err != nil {
		// Compile the pattern alone, so the message is about what was written.
		if _, err2 := regexp.Compile(pattern); err2 != nil {
			err = err2
		}
		msg := err.Error()
		var se *resyntax.Error
		if errors.As(err, &se) {
			msg = fmt.Sprintf("%s: `%s`", se.Code, se.Expr)
			switch se.Code {
			case resyntax.ErrInvalidEscape, resyntax.ErrInvalidPerlOp, resyntax.ErrInvalidNamedCapture:
				msg += " (patterns use RE2 syntax: no backreferences like \\1, no lookahead (?=...) or lookbehind (?<=...))"
			}
		}
		return nil, fmt.Errorf("%s: bad pattern %q: %s", fn, pattern, msg)
	}
	p := &rePattern{rx: rx, src: pattern, flags: flags, insts: progSize(rx)}
	if reCacheSize.Load() < maxCachedRE {
		v, loaded := reCache.LoadOrStore(key, p)
		if loaded {
			return v.(*rePattern), nil
		}
		reCacheSize.Add(1)
	}
	return p, nil
}

// progSize is the number of instructions of rx's compiled program, by
// which RE2's automaton may multiply the work per byte of input; 1 for a
// pattern that is a literal string (matched by a plain search).
func progSize(rx *regexp.Regexp) int {
	if _, complete := rx.LiteralPrefix(); complete {
		return 1
	}
	re, err := resyntax.Parse(rx.String(), resyntax.Perl)
	if err != nil {
		return 1
	}
	prog, err := resyntax.Compile(re.Simplify())
	if err != nil {
		return 1
	}
	return max(len(prog.Inst), 1)
}

// reWork refuses to match s when the work may pass maxRegexWork (input
// bytes times pattern instructions), looks at the deadline before any
// large match (a loop of them must stop when the call's time is up, not
// at the next poll of the steps) and counts the work to the call.
func reWork(th *starlark.Thread, fn string, p *rePattern, s string) error {
	units := int64(len(s)) * int64(p.insts)
	if units > maxRegexWork {
		return &limitError{kind: ErrRuntime, msg: fmt.Sprintf("%s: matching a string of %d bytes against a pattern of %d instructions is more work than the limit of %d (bytes × instructions); match a shorter string, e.g. s[:100000], or a simpler pattern", fn, len(s), p.insts, maxRegexWork)}
	}
	if units < 1<<16 {
		return nil
	}
	if r := runnerOf(th); r != nil {
		if err := r.checkNow(th); err != nil {
			return err
		}
	}
	return work(th, units/16)
}

var reModule = func() *starlarkstruct.Module {
	m := &starlarkstruct.Module{Name: "re", Members: starlark.StringDict{
		"compile":    starlark.NewBuiltin("re.compile", reCompile),
		"search":     reFunc("search", 1, reSearch(modeSearch)),
		"match":      reFunc("match", 1, reSearch(modeMatch)),
		"fullmatch":  reFunc("fullmatch", 1, reSearch(modeFull)),
		"findall":    reFunc("findall", 1, reFindall),
		"finditer":   reFunc("finditer", 1, reFinditer),
		"split":      reFunc("split", 2, reSplit),
		"sub":        reFunc("sub", 3, reSub),
		"escape":     starlark.NewBuiltin("re.escape", reEscape),
		"IGNORECASE": starlark.MakeInt(reIgnoreCase),
		"I":          starlark.MakeInt(reIgnoreCase),
		"MULTILINE":  starlark.MakeInt(reMultiline),
		"M":          starlark.MakeInt(reMultiline),
		"DOTALL":     starlark.MakeInt(reDotAll),
		"S":          starlark.MakeInt(reDotAll),
		"UNICODE":    starlark.MakeInt(reUnicode),
		"U":          starlark.MakeInt(reUnicode),
		"ASCII":      starlark.MakeInt(reASCII),
		"A":          starlark.MakeInt(reASCII),
	}}
	m.Freeze()
	return m
}()

// reOp is one re operation on a compiled pattern; args are what follows the
// pattern (module function) or the receiver (Pattern method).
type reOp func(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)

// reFunc makes the module-level form: re.op(pattern, ..., flags=0), where
// flags may also be the flagsAt'th argument after the pattern, as in
// Python. The pattern may be a string or a compiled Pattern.
func reFunc(name string, flagsAt int, op reOp) *starlark.Builtin {
	fn := "re." + name
	return starlark.NewBuiltin(fn, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("%s: missing pattern", fn)
		}
		var flags int
		rargs := args[1:]
		if len(rargs) > flagsAt {
			if err := starlark.AsInt(rargs[flagsAt], &flags); err != nil {
				return nil, fmt.Errorf("%s: flags: %w", fn, err)
			}
			rargs = rargs[:flagsAt:flagsAt]
		}
		rest := kwargs[:0:0]
		for _, kv := range kwargs {
			if string(kv[0].(starlark.String)) == "flags" {
				if err := starlark.AsInt(kv[1], &flags); err != nil {
					return nil, fmt.Errorf("%s: flags: %w", fn, err)
				}
				continue
			}
			rest = append(rest, kv)
		}
		var p *rePattern
		switch x := args[0].(type) {
		case *rePattern:
			p = x
		case starlark.String:
			var err error
			if p, err = sharedPattern(fn, string(x), flags); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: pattern must be a string, got %s", fn, args[0].Type())
		}
		return op(th, fn, p, rargs, rest)
	})
}

func reCompile(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		pattern string
		flags   int
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "flags?", &flags); err != nil {
		return nil, err
	}
	return sharedPattern(b.Name(), pattern, flags)
}

// sharedPattern is the re.Pattern for src and flags. Patterns are
// immutable, so one serves every call and thread: re.search(r"...", text)
// in a hook allocated a new one per call.
func sharedPattern(fn, src string, flags int) (*rePattern, error) {
	return compileRE(fn, src, flags, modeSearch)
}

func reEscape(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s); err != nil {
		return nil, err
	}
	return starlark.String(regexp.QuoteMeta(s)), nil
}

func reSearch(mode reMode) reOp {
	return func(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		// The common call, one positional string, without UnpackArgs
		// (whose target escapes: an allocation per call).
		str, ok := starlark.String(""), false
		if len(args) == 1 && len(kwargs) == 0 {
			str, ok = args[0].(starlark.String)
		}
		if !ok {
			var s string
			if err := starlark.UnpackArgs(fn, args, kwargs, "string", &s); err != nil {
				return nil, err
			}
			str = starlark.String(s)
		}
		s := string(str)
		if err := reWork(th, fn, p, s); err != nil {
			return nil, err
		}
		rx, err := p.variant(fn, mode)
		if err != nil {
			return nil, err
		}
		idx := rx.FindStringSubmatchIndex(s)
		if idx == nil {
			return starlark.None, nil
		}
		return &reMatch{p: p, s: s, idx: idx}, nil
	}
}

// allMatches finds up to n matches (n <= 0: all), bounded by MaxValueItems.
func allMatches(th *starlark.Thread, fn string, p *rePattern, s string, n int) ([][]int, error) {
	if err := reWork(th, fn, p, s); err != nil {
		return nil, err
	}
	rx := p.rx
	limit := limitsOf(th).MaxValueItems
	want := limit + 1
	if n > 0 && n < want {
		want = n
	}
	all := rx.FindAllStringSubmatchIndex(s, want)
	if len(all) > limit {
		return nil, fmt.Errorf("%s: more than %d matches", fn, limit)
	}
	return all, nil
}

func reFindall(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(fn, args, kwargs, "string", &s); err != nil {
		return nil, err
	}
	all, err := allMatches(th, fn, p, s, 0)
	if err != nil {
		return nil, err
	}
	groups := p.rx.NumSubexp()
	out := make([]starlark.Value, len(all))
	for i, idx := range all {
		switch groups {
		case 0:
			out[i] = starlark.String(s[idx[0]:idx[1]])
		case 1:
			out[i] = starlark.String(groupText(s, idx, 1, ""))
		default:
			t := make(starlark.Tuple, groups)
			for g := 1; g <= groups; g++ {
				t[g-1] = starlark.String(groupText(s, idx, g, ""))
			}
			out[i] = t
		}
	}
	return starlark.NewList(out), nil
}

func reFinditer(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(fn, args, kwargs, "string", &s); err != nil {
		return nil, err
	}
	all, err := allMatches(th, fn, p, s, 0)
	if err != nil {
		return nil, err
	}
	out := make([]starlark.Value, len(all))
	for i, idx := range all {
		out[i] = &reMatch{p: p, s: s, idx: idx}
	}
	return starlark.NewList(out), nil
}

func reSplit(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		s        string
		maxsplit int
	)
	if err := starlark.UnpackArgs(fn, args, kwargs, "string", &s, "maxsplit?", &maxsplit); err != nil {
		return nil, err
	}
	all, err := allMatches(th, fn, p, s, maxsplit)
	if err != nil {
		return nil, err
	}
	groups := p.rx.NumSubexp()
	if n := len(all)*(groups+1) + 1; n > limitsOf(th).MaxValueItems {
		return nil, fmt.Errorf("%s: result of %d pieces is more than the limit of %d", fn, n, limitsOf(th).MaxValueItems)
	}
	out := make([]starlark.Value, 0, len(all)*(groups+1)+1)
	last := 0
	for _, idx := range all {
		out = append(out, starlark.String(s[last:idx[0]]))
		for g := 1; g <= groups; g++ {
			if idx[2*g] < 0 {
				out = append(out, starlark.None)
			} else {
				out = append(out, starlark.String(s[idx[2*g]:idx[2*g+1]]))
			}
		}
		last = idx[1]
	}
	out = append(out, starlark.String(s[last:]))
	return starlark.NewList(out), nil
}

func reSub(th *starlark.Thread, fn string, p *rePattern, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		repl  starlark.Value
		s     string
		count int
	)
	if err := starlark.UnpackArgs(fn, args, kwargs, "repl", &repl, "string", &s, "count?", &count); err != nil {
		return nil, err
	}
	var tmpl []replPiece
	fnRepl := false
	switch r := repl.(type) {
	case starlark.String:
		var err error
		if tmpl, err = parseRepl(string(r), p.rx); err != nil {
			return nil, fmt.Errorf("%s: repl: %w", fn, err)
		}
	case starlark.Callable:
		fnRepl = true
	default:
		return nil, fmt.Errorf("%s: repl must be a string or a function, got %s", fn, repl.Type())
	}
	all, err := allMatches(th, fn, p, s, count)
	if err != nil {
		return nil, err
	}
	max := limitsOf(th).MaxStringBytes
	var b strings.Builder
	last := 0
	for _, idx := range all {
		b.WriteString(s[last:idx[0]])
		// An empty template parses to no pieces: test the kind of repl,
		// not the template, or "" would be called as a function.
		if !fnRepl {
			for _, piece := range tmpl {
				if piece.group < 0 {
					b.WriteString(piece.lit)
				} else {
					b.WriteString(groupText(s, idx, piece.group, ""))
				}
			}
		} else {
			v, err := starlark.Call(th, repl, starlark.Tuple{&reMatch{p: p, s: s, idx: idx}}, nil)
			if err != nil {
				return nil, err
			}
			str, ok := v.(starlark.String)
			if !ok {
				return nil, fmt.Errorf("%s: repl function returned %s, want string", fn, v.Type())
			}
			b.WriteString(string(str))
		}
		last = idx[1]
		if b.Len() > max {
			return nil, fmt.Errorf("%s: result is more than the limit of %d bytes", fn, max)
		}
	}
	b.WriteString(s[last:])
	if b.Len() > max {
		return nil, fmt.Errorf("%s: result of %d bytes is more than the limit of %d", fn, b.Len(), max)
	}
	return starlark.String(b.String()), nil
}

// replPiece is a literal (group < 0) or a group reference of a repl string.
type replPiece struct {
	lit   string
	group int
}

// parseRepl reads a Python replacement template: \1 .. \99, \g<n>,
// \g<name>, the escapes \n \t \r \f \v \a \\, other non-letter escapes kept
// as written.
func parseRepl(repl string, rx *regexp.Regexp) ([]replPiece, error) {
	var pieces []replPiece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			pieces = append(pieces, replPiece{lit: lit.String(), group: -1})
			lit.Reset()
		}
	}
	group := func(g int, ref string) error {
		if g < 0 || g > rx.NumSubexp() {
			return fmt.Errorf("invalid group reference %s: the pattern has %d groups", ref, rx.NumSubexp())
		}
		flush()
		pieces = append(pieces, replPiece{group: g})
		return nil
	}
	for i := 0; i < len(repl); i++ {
		c := repl[i]
		if c != '\\' || i+1 == len(repl) {
			lit.WriteByte(c)
			continue
		}
		i++
		c = repl[i]
		switch {
		case c >= '1' && c <= '9':
			j := i + 1
			if j < len(repl) && repl[j] >= '0' && repl[j] <= '9' {
				j++
			}
			g, _ := strconv.Atoi(repl[i:j])
			if err := group(g, `\`+repl[i:j]); err != nil {
				return nil, err
			}
			i = j - 1
		case c == 'g':
			end := strings.IndexByte(repl[i:], '>')
			if i+1 >= len(repl) || repl[i+1] != '<' || end < 0 {
				return nil, fmt.Errorf(`missing <name> after \g`)
			}
			name := repl[i+2 : i+end]
			g, err := strconv.Atoi(name)
			if err != nil {
				g = rx.SubexpIndex(name)
				if g < 0 {
					return nil, fmt.Errorf(`unknown group name in \g<%s>`, name)
				}
			}
			if err := group(g, `\g<`+name+`>`); err != nil {
				return nil, err
			}
			i += end
		case c == '\\':
			lit.WriteByte('\\')
		case c == 'n':
			lit.WriteByte('\n')
		case c == 't':
			lit.WriteByte('\t')
		case c == 'r':
			lit.WriteByte('\r')
		case c == 'f':
			lit.WriteByte('\f')
		case c == 'v':
			lit.WriteByte('\v')
		case c == 'a':
			lit.WriteByte('\a')
		case c == '0':
			return nil, fmt.Errorf(`\0 is not supported; write \g<0> for the whole match`)
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			return nil, fmt.Errorf(`bad escape \%c`, c)
		default:
			lit.WriteByte('\\')
			lit.WriteByte(c)
		}
	}
	flush()
	return pieces, nil
}

func groupText(s string, idx []int, g int, missing string) string {
	if 2*g+1 >= len(idx) || idx[2*g] < 0 {
		return missing
	}
	return s[idx[2*g]:idx[2*g+1]]
}
