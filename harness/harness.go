package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/whalerun/whale/internal/textdist"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Defaults of Options. Steps are the deterministic bound (about 20 ns each
// on a laptop core: 10M steps ≈ 0.2 s); the deadlines are a backstop for
// slow helpers and loaded machines and are set well above what the step
// limit allows, so that a harness behaves the same on a busy machine.
const (
	DefaultMaxSteps       = 10_000_000
	DefaultLoadSteps      = 10_000_000
	DefaultCallTimeout    = 5 * time.Second
	DefaultLoadTimeout    = 10 * time.Second
	DefaultMaxStringBytes = 1 << 20 // a string made by one builtin call
	MaxSourceBytes        = 1 << 20
	// DefaultMaxRange bounds range(n): no hook needs more, and list(range(n))
	// would otherwise allocate without taking a step per element.
	DefaultMaxRange = 1 << 20
)

// fileOptions are the Starlark dialect of harnesses. while, set, top-level
// if/for and reassigning globals are on so that Python habits (PROMPT +=
// "...", a while loop) work; the step limit bounds every loop. Recursion
// stays off: nothing a harness does needs it. There is no load().
var fileOptions = &syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
	Recursion:       false,
}

// Options configure Load. Zero values take the defaults above.
type Options struct {
	// Contract is what the harness may define; nil means Base().
	Contract *Contract
	// MaxSteps bounds each hook call; LoadSteps the module's top level.
	MaxSteps, LoadSteps uint64
	// CallTimeout bounds each hook call; LoadTimeout the top level.
	CallTimeout, LoadTimeout time.Duration
	// MaxAllocBytes bounds what one operation may make: a string of this
	// many bytes, a list or tuple of MaxAllocBytes/16 elements, a dict or
	// set of MaxAllocBytes/64 entries; the operators + * % | - << and
	// their augmented forms, slices, str(), repr(), list(), sorted(),
	// s.join(), s.format(), s.replace(), s.split(), ... check the size of
	// their result before making it. Zero means DefaultMaxAllocBytes.
	MaxAllocBytes int
	// MaxMemoryBytes bounds what one call (or the module's top level)
	// allocates in total through those operations, garbage included.
	// Zero means DefaultMaxMemoryBytes.
	MaxMemoryBytes int64
	// MaxHeapBytes cancels Starlark code once the process's heap objects
	// pass this many bytes (checked every few thousand steps, and every
	// few dozen MiB that the bounded operations allocate). It is
	// process-wide: it is the backstop against many calls that each stay
	// within their own budget. Zero means DefaultMaxHeapBytes(), three
	// quarters of the memory available to the process; math.MaxUint64
	// turns the check off.
	MaxHeapBytes uint64
	// MaxStringBytes bounds a string made by one builtin call (re.sub,
	// json.encode, ...).
	MaxStringBytes int
	// MaxValueBytes and MaxValueItems bound each converted value: hook
	// arguments and results, helper results.
	MaxValueBytes, MaxValueItems int
	// MaxRange bounds the length of range(n).
	MaxRange int
	// Recorder sees every hook call; see also WithRecorder.
	Recorder Recorder
}

func (o Options) withDefaults() Options {
	if o.Contract == nil {
		o.Contract = Base()
	}
	if o.MaxSteps == 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.LoadSteps == 0 {
		o.LoadSteps = DefaultLoadSteps
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	if o.MaxStringBytes <= 0 {
		o.MaxStringBytes = DefaultMaxStringBytes
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.MaxValueItems <= 0 {
		o.MaxValueItems = DefaultMaxValueItems
	}
	if o.MaxRange <= 0 {
		o.MaxRange = DefaultMaxRange
	}
	if o.MaxAllocBytes <= 0 {
		o.MaxAllocBytes = DefaultMaxAllocBytes
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	if o.MaxHeapBytes == 0 {
		o.MaxHeapBytes = DefaultMaxHeapBytes()
	}
	return o
}

// Harness is a loaded, checked harness. It is immutable: its module globals
// are frozen after loading, so every hook is a function of its arguments,
// and one Harness may serve any number of concurrent Calls.
type Harness struct {
	*core
	recorder Recorder
}

// core is what the views of a harness (WithRecorder) share.
type core struct {
	id       string
	file     string
	src      []byte
	opts     Options
	contract *Contract

	globals     starlark.StringDict
	predeclared starlark.StringDict
	hooks       map[string]*starlark.Function // defined by the harness
	calls       map[string]*hookCall          // every hook of the contract, as Call needs it
	consts      map[string]any                // every contract constant: the harness's or the default
	defined     map[string]bool               // constants and hooks the harness defines
	positions   map[string]Pos                // where each top-level name is bound
	tools       []Tool                        // TOOLS resolved against the contract's tools
	warnings    []Problem
}

// hookCall is a hook of the contract and the harness's function for it,
// nil when the default runs.
type hookCall struct {
	spec HookSpec
	fn   *starlark.Function
}

// SourceID is the content address of a harness source: "sha256:<hex>".
func SourceID(src []byte) string {
	sum := sha256.Sum256(src)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Load compiles and runs a harness module once, in the sandbox, and checks
// it against opts.Contract. filename appears in every position and error.
// The module may not load() other files; it sees only the builtins listed by
// Contract.Doc. Any problem is a *LoadError listing every problem found with
// its position; warnings (names that look like misspelled constants or
// hooks) are in Warnings.
func Load(filename string, src []byte, opts Options) (*Harness, error) {
	opts = opts.withDefaults()
	if err := opts.Contract.Validate(); err != nil {
		return nil, fmt.Errorf("load harness %s: %w", filename, err)
	}
	h := &Harness{core: &core{
		id:       SourceID(src),
		file:     filename,
		src:      append([]byte(nil), src...),
		opts:     opts,
		contract: opts.Contract,
		hooks:    map[string]*starlark.Function{},
		consts:   map[string]any{},
		defined:  map[string]bool{},
	}, recorder: opts.Recorder}
	fail := func(problems []Problem, kind, cause error) (*Harness, error) {
		return nil, &LoadError{File: filename, Problems: problems, kind: kind, cause: cause}
	}
	if len(src) > MaxSourceBytes {
		return fail([]Problem{{Pos: Pos{File: filename}, Msg: fmt.Sprintf("source is %d bytes, more than the limit of %d", len(src), MaxSourceBytes)}}, nil, nil)
	}
	predeclared, err := h.makePredeclared()
	if err != nil {
		return nil, fmt.Errorf("load harness %s: %w", filename, err)
	}
	h.predeclared = predeclared

	f, err := fileOptions.Parse(filename, src, 0)
	if err != nil {
		return fail(syntaxProblems(err, src), nil, err)
	}
	if problems := loadStatements(f); len(problems) > 0 {
		return fail(problems, nil, nil)
	}
	h.positions = topLevelBindings(f)
	rewriteFile(f)
	prog, err := starlark.FileProgram(f, predeclared.Has)
	if err != nil {
		return fail(resolveProblems(err), nil, err)
	}

	var globals starlark.StringDict
	_, runErr := h.run(context.Background(), "<toplevel>", opts.LoadSteps, opts.LoadTimeout, true, nil, func(th *starlark.Thread) (starlark.Value, error) {
		var err error
		globals, err = prog.Init(th, predeclared)
		return starlark.None, err
	})
	if runErr != nil {
		he := runErr.(*HookError)
		return nil, &LoadError{
			File:      filename,
			Problems:  []Problem{{Pos: he.Pos, Msg: "top level: " + he.Msg}},
			Backtrace: he.Backtrace,
			kind:      he.kind,
			cause:     he.cause,
		}
	}
	// The rewrite's hidden temporaries (rewrite.go) are no part of the
	// module.
	for name := range globals {
		if strings.HasPrefix(name, hiddenPrefix) {
			delete(globals, name)
		}
	}
	if err := checkFreeze(globals); err != nil {
		return fail([]Problem{{Pos: Pos{File: filename}, Msg: "top level: " + err.Error()}}, ErrMemory, err)
	}
	globals.Freeze()
	h.globals = globals

	if problems := h.check(); len(problems) > 0 {
		return fail(problems, nil, nil)
	}
	h.calls = make(map[string]*hookCall, len(h.contract.Hooks))
	for _, spec := range h.contract.Hooks {
		h.calls[spec.Name] = &hookCall{spec: spec, fn: h.hooks[spec.Name]}
	}
	return h, nil
}

// Check loads a harness and returns its warnings; errors are as Load's.
// It is what `whale harness check` and the propose stage's validation run.
func Check(filename string, src []byte, opts Options) ([]Problem, error) {
	h, err := Load(filename, src, opts)
	if err != nil {
		return nil, err
	}
	return h.Warnings(), nil
}

func syntaxProblems(err error, src []byte) []Problem {
	var se syntax.Error
	if errors.As(err, &se) {
		msg := se.Msg
		if line := sourceLine(src, int(se.Pos.Line)); strings.HasPrefix(strings.TrimSpace(line), "import ") || strings.HasPrefix(strings.TrimSpace(line), "from ") {
			msg += " (Starlark has no import statement: re, json and math are predeclared)"
		}
		return []Problem{{Pos: posOf(se.Pos), Msg: msg}}
	}
	return []Problem{{Msg: err.Error()}}
}

func sourceLine(src []byte, line int) string {
	if line < 1 {
		return ""
	}
	lines := strings.SplitN(string(src), "\n", line+1)
	if len(lines) < line {
		return ""
	}
	return lines[line-1]
}

// forbiddenHints explain names a Python programmer may reach for.
var forbiddenHints = map[string]string{
	"open":       "harnesses cannot read or write files",
	"exec":       "harnesses cannot run code from strings",
	"eval":       "harnesses cannot run code from strings",
	"compile":    "harnesses cannot run code from strings",
	"__import__": "harnesses cannot import modules; re, json and math are predeclared",
	"import":     "harnesses cannot import modules; re, json and math are predeclared",
	"os":         "harnesses cannot reach the operating system",
	"sys":        "harnesses cannot reach the operating system",
	"subprocess": "harnesses cannot start processes",
	"socket":     "harnesses cannot open connections",
	"requests":   "harnesses cannot open connections; the loop calls tools",
	"time":       "harnesses are deterministic and have no clock",
	"random":     "harnesses are deterministic and have no random numbers",
	"input":      "harnesses cannot read input",
	"isinstance": "use type(x) == \"string\" (Starlark type names: string, int, float, bool, list, dict, tuple, NoneType)",
	"textwrap":   "use the predeclared dedent(s) and truncate(s, n)",
}

func resolveProblems(err error) []Problem {
	var list resolve.ErrorList
	if !errors.As(err, &list) {
		return []Problem{{Msg: err.Error()}}
	}
	problems := make([]Problem, 0, len(list))
	for _, e := range list {
		msg := e.Msg
		if name, ok := strings.CutPrefix(msg, "undefined: "); ok {
			if hint, ok := forbiddenHints[name]; ok {
				msg += " (" + hint + ")"
			}
		}
		problems = append(problems, Problem{Pos: posOf(e.Pos), Msg: msg})
	}
	return problems
}

func loadStatements(f *syntax.File) []Problem {
	var problems []Problem
	syntax.Walk(f, func(n syntax.Node) bool {
		if ls, ok := n.(*syntax.LoadStmt); ok {
			problems = append(problems, Problem{Pos: posOf(ls.Load),
				Msg: fmt.Sprintf("load(%s) is not allowed: a harness is one self-contained file", ls.Module.Raw)})
		}
		return true
	})
	return problems
}

// topLevelBindings finds where each global is bound: the last top-level
// assignment or def of the name (the one whose value survives, when the
// code runs straight through).
func topLevelBindings(f *syntax.File) map[string]Pos {
	pos := map[string]Pos{}
	var bind func(e syntax.Expr)
	bind = func(e syntax.Expr) {
		switch x := e.(type) {
		case *syntax.Ident:
			pos[x.Name] = posOf(x.NamePos)
		case *syntax.TupleExpr:
			for _, el := range x.List {
				bind(el)
			}
		case *syntax.ListExpr:
			for _, el := range x.List {
				bind(el)
			}
		case *syntax.ParenExpr:
			bind(x.X)
		}
	}
	var walk func(stmts []syntax.Stmt)
	walk = func(stmts []syntax.Stmt) {
		for _, s := range stmts {
			switch x := s.(type) {
			case *syntax.AssignStmt:
				bind(x.LHS)
			case *syntax.DefStmt:
				pos[x.Name.Name] = posOf(x.Name.NamePos)
			case *syntax.IfStmt:
				walk(x.True)
				walk(x.False)
			case *syntax.ForStmt:
				bind(x.Vars)
				walk(x.Body)
			case *syntax.WhileStmt:
				walk(x.Body)
			}
		}
	}
	walk(f.Stmts)
	return pos
}

// check validates the module's globals against the contract and fills the
// constant table.
func (h *Harness) check() []Problem {
	var problems []Problem
	at := func(name string) Pos {
		if p, ok := h.positions[name]; ok {
			return p
		}
		return Pos{File: h.file}
	}
	for _, k := range h.contract.Constants {
		v, ok := h.globals[k.Name]
		if !ok {
			v, _ := normalize(k.Default) // Validate checked it
			if i, ok := v.(int64); ok && k.Type == TypeFloat {
				v = float64(i) // as checkConst makes a harness's value
			}
			h.consts[k.Name] = v
			continue
		}
		h.defined[k.Name] = true
		if _, isFn := v.(starlark.Callable); isFn {
			problems = append(problems, Problem{Pos: at(k.Name), Msg: fmt.Sprintf("%s is a constant (%s), not a function", k.Name, k.Type)})
			continue
		}
		gv, err := FromStarlark(v)
		if err == nil {
			gv, err = checkConst(k, gv)
		}
		if err != nil {
			problems = append(problems, Problem{Pos: at(k.Name), Msg: fmt.Sprintf("constant %s: %v", k.Name, err)})
			continue
		}
		h.consts[k.Name] = gv
	}
	for _, spec := range h.contract.Hooks {
		v, ok := h.globals[spec.Name]
		if !ok {
			continue
		}
		h.defined[spec.Name] = true
		fn, ok := v.(*starlark.Function)
		if !ok {
			problems = append(problems, Problem{Pos: at(spec.Name),
				Msg: fmt.Sprintf("hook %s must be a function %s(%s), got a %s", spec.Name, spec.Name, strings.Join(spec.Params, ", "), v.Type())})
			continue
		}
		if msg := arityProblem(fn, spec); msg != "" {
			problems = append(problems, Problem{Pos: posOf(fn.Position()), Msg: msg})
			continue
		}
		h.hooks[spec.Name] = fn
	}
	if len(problems) == 0 {
		problems = h.resolveTools(at)
	}
	h.warnings = h.unknownNames()
	return problems
}

// arityProblem says why fn cannot be called with len(spec.Params)
// positional arguments, or "" if it can.
func arityProblem(fn *starlark.Function, spec HookSpec) string {
	n := len(spec.Params)
	total := fn.NumParams()
	if fn.HasVarargs() {
		total--
	}
	if fn.HasKwargs() {
		total--
	}
	positional := total - fn.NumKwonlyParams()
	required := 0
	names := make([]string, 0, positional)
	for i := 0; i < positional; i++ {
		name, _ := fn.Param(i)
		names = append(names, name)
		if fn.ParamDefault(i) == nil {
			required++
		}
	}
	for i := positional; i < total; i++ {
		if fn.ParamDefault(i) == nil {
			name, _ := fn.Param(i)
			return fmt.Sprintf("hook %s has a required keyword-only parameter %s; the loop passes only %s", spec.Name, name, paramList(spec.Params))
		}
	}
	if required <= n && (n <= positional || fn.HasVarargs()) {
		return ""
	}
	return fmt.Sprintf("hook %s takes %s; the loop calls it with %s", spec.Name, paramList(names), paramList(spec.Params))
}

func paramList(names []string) string {
	if len(names) == 0 {
		return "no parameters"
	}
	word := "parameters"
	if len(names) == 1 {
		word = "parameter"
	}
	return fmt.Sprintf("%d %s (%s)", len(names), word, strings.Join(names, ", "))
}

// unknownNames warns about public globals the contract does not know that
// look like constants (UPPER_CASE) or like a misspelled hook.
func (h *Harness) unknownNames() []Problem {
	var warns []Problem
	names := h.globals.Keys()
	sort.Strings(names)
	for _, name := range names {
		if strings.HasPrefix(name, "_") || strings.HasPrefix(name, hiddenPrefix) {
			continue
		}
		if _, ok := h.contract.Const(name); ok {
			continue
		}
		if _, ok := h.contract.Hook(name); ok {
			continue
		}
		pos := h.positions[name]
		if pos == (Pos{}) {
			pos = Pos{File: h.file}
		}
		if _, shadow := h.predeclared[name]; shadow {
			warns = append(warns, Problem{Pos: pos, Msg: fmt.Sprintf("%s shadows the builtin of the same name", name)})
			continue
		}
		_, isFn := h.globals[name].(starlark.Callable)
		if near := h.nearest(name, isFn); near != "" {
			warns = append(warns, Problem{Pos: pos, Msg: fmt.Sprintf("%s is not part of contract %s; did you mean %s? (the loop ignores %s)", name, h.contract.Name, near, name)})
			continue
		}
		if !isFn && name == strings.ToUpper(name) && strings.ContainsAny(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			warns = append(warns, Problem{Pos: pos, Msg: fmt.Sprintf("%s looks like a constant but is not part of contract %s; the loop ignores it", name, h.contract.Name)})
		}
	}
	return warns
}

// nearest returns the contract name (a hook for functions, a constant
// otherwise) within edit distance 2 of name, if any.
func (h *Harness) nearest(name string, isFn bool) string {
	var candidates []string
	if isFn {
		for _, s := range h.contract.Hooks {
			candidates = append(candidates, s.Name)
		}
	} else {
		for _, s := range h.contract.Constants {
			candidates = append(candidates, s.Name)
		}
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := textdist.Levenshtein(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// ID is the harness's content address, SourceID of its source.
func (h *Harness) ID() string { return h.id }

// Filename is the name the harness was loaded under.
func (h *Harness) Filename() string { return h.file }

// Source returns the harness source.
func (h *Harness) Source() []byte { return append([]byte(nil), h.src...) }

// Contract is the contract the harness was checked against.
func (h *Harness) Contract() *Contract { return h.contract }

// Warnings are non-fatal findings of the check, with positions.
func (h *Harness) Warnings() []Problem { return append([]Problem(nil), h.warnings...) }

// Defines reports whether the harness itself defines a constant or hook
// (rather than taking the contract's default).
func (h *Harness) Defines(name string) bool { return h.defined[name] }

// Position is where the harness binds a top-level name; zero if it does not.
func (h *Harness) Position(name string) Pos { return h.positions[name] }

// Constants returns every contract constant's effective value (plain Go),
// e.g. for recording next to a rollout.
func (h *Harness) Constants() map[string]any {
	out := make(map[string]any, len(h.consts))
	for k, v := range h.consts {
		out[k] = v
	}
	return out
}

// WithRecorder returns a view of h whose calls report to rec instead of
// Options.Recorder: one per episode, so each episode gets its own trace.
// The view shares everything else and costs one small allocation.
func (h *Harness) WithRecorder(rec Recorder) *Harness {
	return &Harness{core: h.core, recorder: rec}
}

// constant returns a constant's value; asking for a name the contract does
// not declare is a bug in Go code, so it panics.
func (h *Harness) constant(name string, want Type) any {
	spec, ok := h.contract.Const(name)
	if !ok {
		panic(fmt.Sprintf("harness: %s is not a constant of contract %s", name, h.contract.Name))
	}
	if spec.Type != want && !(want == TypeString && spec.Type == TypeTemplate) {
		panic(fmt.Sprintf("harness: constant %s is a %s, not a %s", name, spec.Type, want))
	}
	return h.consts[name]
}

// String returns a string or template constant.
func (h *Harness) String(name string) string { return h.constant(name, TypeString).(string) }

// Int returns an int constant.
func (h *Harness) Int(name string) int { return int(h.constant(name, TypeInt).(int64)) }

// Float returns a float constant.
func (h *Harness) Float(name string) float64 { return h.constant(name, TypeFloat).(float64) }

// Bool returns a bool constant.
func (h *Harness) Bool(name string) bool { return h.constant(name, TypeBool).(bool) }

// List returns a list constant (a fresh copy).
func (h *Harness) List(name string) []any {
	v, _ := normalize(h.constant(name, TypeList))
	l, _ := v.([]any)
	return l
}

// Dict returns a dict constant (a fresh copy).
func (h *Harness) Dict(name string) map[string]any {
	v, _ := normalize(h.constant(name, TypeDict))
	m, _ := v.(map[string]any)
	return m
}

// Render fills a template constant with fields, with the semantics of
// Python's str.format (and of USER_PROMPT.format(**fields) in the harness).
// Fields the template does not use are ignored.
func (h *Harness) Render(name string, fields map[string]any) (string, error) {
	tmpl := h.constant(name, TypeTemplate).(string)
	out, err := renderTemplate(tmpl, fields)
	if err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return out, nil
}

func renderTemplate(tmpl string, fields map[string]any) (string, error) {
	format, _ := starlark.String(tmpl).Attr("format")
	kwargs := make([]starlark.Tuple, 0, len(fields))
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v, err := ToStarlark(fields[k])
		if err != nil {
			return "", fmt.Errorf("field %s: %w", k, err)
		}
		kwargs = append(kwargs, starlark.Tuple{starlark.String(k), v})
	}
	// A template that repeats a field a million times must not make a
	// million copies of it.
	n, err := formatSize(tmpl, nil, kwargs, DefaultMaxAllocBytes)
	if err == nil && n > DefaultMaxAllocBytes {
		err = memoryError("the rendered text would be more than %d bytes (MaxAllocBytes)", DefaultMaxAllocBytes)
	}
	if err != nil {
		return "", err
	}
	v, err := starlark.Call(&starlark.Thread{Name: "render"}, format, nil, kwargs)
	if err != nil {
		return "", err
	}
	return string(v.(starlark.String)), nil
}

// checkTemplate renders tmpl with placeholder values for fields, so that a
// template using an unknown field or a bare {} fails at load time.
func checkTemplate(tmpl string, fields []string) error {
	m := make(map[string]any, len(fields))
	for _, f := range fields {
		m[f] = "x"
	}
	if _, err := renderTemplate(tmpl, m); err != nil {
		avail := "no fields"
		if len(fields) > 0 {
			avail = "only {" + strings.Join(fields, "}, {") + "}"
		}
		msg := err.Error()
		if strings.Contains(msg, "tuple index out of range") {
			msg = "it has a positional field such as {} or {0}"
		}
		return fmt.Errorf("template does not render: %s (it may use %s; write {{ and }} for literal braces)", msg, avail)
	}
	return nil
}
