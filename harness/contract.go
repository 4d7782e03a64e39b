package harness

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Type is the type of a harness constant.
type Type string

// Constant types. A template is a string rendered with Python str.format
// semantics ({field}, {{ and }} for literal braces) over the spec's Fields.
const (
	TypeString   Type = "string"
	TypeTemplate Type = "template"
	TypeInt      Type = "int"
	TypeFloat    Type = "float"
	TypeBool     Type = "bool"
	TypeList     Type = "list"
	TypeDict     Type = "dict"
)

// ConstSpec declares a constant a harness may define. Default is used when
// the harness leaves it out and is given as plain Go (string, int, int64,
// float64, bool, []any, map[string]any).
type ConstSpec struct {
	Name    string
	Type    Type
	Default any
	Doc     string
	// Min and Max bound an int constant when non-nil (see Bound).
	Min, Max *int64
	// Fields are the names a template may use, e.g. {question}.
	Fields []string
	// Shape, when set, further validates a list or dict constant.
	Shape Shape
}

// Bound returns a pointer to n, for ConstSpec.Min and Max.
func Bound(n int64) *int64 { return &n }

// DefaultFunc is the Go implementation of a hook, used when the harness does
// not define it. args are plain Go values as FromStarlark makes them,
// which may share maps and lists with the caller's (see callDefault): a
// default must never modify them, nor keep them past the call. The
// result is validated like a harness's.
type DefaultFunc func(ctx context.Context, h *Harness, args []any) (any, error)

// HookSpec declares a hook: a function the episode loop calls with
// len(Params) positional arguments.
type HookSpec struct {
	Name    string
	Params  []string
	Returns Shape
	Doc     string
	// Default runs when the harness does not define the hook; DefaultDoc
	// says what it does, for proposers.
	Default    DefaultFunc
	DefaultDoc string
}

// HelperFunc implements a domain helper. args are plain Go values
// (FromStarlark) bound to Builtin.Params by position or keyword; the result
// is converted with ToStarlark. ctx is the hook call's context: a slow
// helper should give up when it is done.
type HelperFunc func(ctx context.Context, args []any) (any, error)

// Builtin is a read-only helper a domain gives to harness code, e.g.
// legal_moves(fen). It must be a pure function of its arguments.
type Builtin struct {
	Params  []string // all required
	Returns string   // for the doc, e.g. "list of UCI strings"
	Doc     string
	Fn      HelperFunc
}

// Contract is what a harness may define for one domain: constants, hooks
// and the helpers its code may call. Build one with Base and Extend.
type Contract struct {
	Name      string
	Intro     string // Markdown, printed above the sections
	Constants []ConstSpec
	Hooks     []HookSpec
	Helpers   map[string]Builtin
	// Tools are the native function tools the domain can execute; a
	// harness offers the model those it names in TOOLS.
	Tools []ToolSpec
	// StateDoc describes the state dict the loop passes to hooks (Markdown).
	StateDoc string
}

// Extend returns a copy of c with ext merged in: constants and hooks with a
// name c already has replace it in place (a domain may change a default),
// new ones are appended, helpers and tools are added (a tool with a name c
// has replaces it). Name, Intro and StateDoc replace
// c's when ext sets them.
func (c *Contract) Extend(ext Contract) *Contract {
	out := &Contract{
		Name:      c.Name,
		Intro:     c.Intro,
		StateDoc:  c.StateDoc,
		Constants: append([]ConstSpec(nil), c.Constants...),
		Hooks:     append([]HookSpec(nil), c.Hooks...),
		Helpers:   make(map[string]Builtin, len(c.Helpers)+len(ext.Helpers)),
		Tools:     append([]ToolSpec(nil), c.Tools...),
	}
	for _, t := range ext.Tools {
		if i := slices.IndexFunc(out.Tools, func(o ToolSpec) bool { return o.Name == t.Name }); i >= 0 {
			out.Tools[i] = t
		} else {
			out.Tools = append(out.Tools, t)
		}
	}
	if ext.Name != "" {
		out.Name = ext.Name
	}
	if ext.Intro != "" {
		out.Intro = ext.Intro
	}
	if ext.StateDoc != "" {
		out.StateDoc = ext.StateDoc
	}
	for _, k := range ext.Constants {
		if i := out.constIndex(k.Name); i >= 0 {
			out.Constants[i] = k
		} else {
			out.Constants = append(out.Constants, k)
		}
	}
	for _, h := range ext.Hooks {
		if i := out.hookIndex(h.Name); i >= 0 {
			out.Hooks[i] = h
		} else {
			out.Hooks = append(out.Hooks, h)
		}
	}
	for n, b := range c.Helpers {
		out.Helpers[n] = b
	}
	for n, b := range ext.Helpers {
		out.Helpers[n] = b
	}
	return out
}

func (c *Contract) constIndex(name string) int {
	for i, k := range c.Constants {
		if k.Name == name {
			return i
		}
	}
	return -1
}

func (c *Contract) hookIndex(name string) int {
	for i, h := range c.Hooks {
		if h.Name == name {
			return i
		}
	}
	return -1
}

// Const returns the spec of a constant, if the contract declares it.
func (c *Contract) Const(name string) (ConstSpec, bool) {
	if i := c.constIndex(name); i >= 0 {
		return c.Constants[i], true
	}
	return ConstSpec{}, false
}

// WithDefault is the contract's spec of constant name with another
// default, for a domain that extends the contract: type, range and doc stay
// the base's. It panics when the contract has no such constant, which is a
// bug in the domain's Go code, not in a harness.
func (c *Contract) WithDefault(name string, v any) ConstSpec {
	k, ok := c.Const(name)
	if !ok {
		panic(fmt.Sprintf("contract %s has no constant %s", c.Name, name))
	}
	k.Default = v
	return k
}

// StringArg is argument i of a helper call as a string; the error names
// the parameter, for the harness author.
func StringArg(args []any, i int, name string) (string, error) {
	s, ok := args[i].(string)
	if !ok {
		return "", fmt.Errorf("%s: want a string, got %T", name, args[i])
	}
	return s, nil
}

// StringFunc makes a helper of one string parameter (named param in
// errors) that returns f of it.
func StringFunc(param string, f func(string) string) HelperFunc {
	return func(_ context.Context, args []any) (any, error) {
		s, err := StringArg(args, 0, param)
		if err != nil {
			return nil, err
		}
		return f(s), nil
	}
}

// OptionalStringFunc is StringFunc for an f that may find nothing: the
// helper returns None then.
func OptionalStringFunc(param string, f func(string) (string, bool)) HelperFunc {
	return func(_ context.Context, args []any) (any, error) {
		s, err := StringArg(args, 0, param)
		if err != nil {
			return nil, err
		}
		if v, ok := f(s); ok {
			return v, nil
		}
		return nil, nil
	}
}

// Hook returns the spec of a hook, if the contract declares it.
func (c *Contract) Hook(name string) (HookSpec, bool) {
	if i := c.hookIndex(name); i >= 0 {
		return c.Hooks[i], true
	}
	return HookSpec{}, false
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the contract itself: unique, well-formed names that do not
// clash with each other or with the runtime's builtins; defaults of the
// declared type and range; templates whose default renders; hooks with a
// return shape and a default. Load calls it; a failure is a bug in Go code.
func (c *Contract) Validate() error {
	var errs []string
	seen := map[string]string{}
	claim := func(name, what string) {
		if !identRE.MatchString(name) {
			errs = append(errs, fmt.Sprintf("%s %q is not an identifier", what, name))
		}
		if prev, ok := seen[name]; ok {
			errs = append(errs, fmt.Sprintf("%s %q is also a %s", what, name, prev))
		}
		if reservedNames[name] {
			errs = append(errs, fmt.Sprintf("%s %q clashes with a builtin of the runtime", what, name))
		}
		seen[name] = what
	}
	for _, k := range c.Constants {
		claim(k.Name, "constant")
		if _, err := checkConst(k, k.Default); err != nil {
			errs = append(errs, fmt.Sprintf("constant %s: default: %v", k.Name, err))
		}
	}
	for _, h := range c.Hooks {
		claim(h.Name, "hook")
		if h.Returns == nil {
			errs = append(errs, fmt.Sprintf("hook %s: no return shape", h.Name))
		}
		if h.Default == nil {
			errs = append(errs, fmt.Sprintf("hook %s: no default", h.Name))
		}
		for _, p := range h.Params {
			if !identRE.MatchString(p) {
				errs = append(errs, fmt.Sprintf("hook %s: parameter %q is not an identifier", h.Name, p))
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.Helpers)) {
		claim(n, "helper")
		if c.Helpers[n].Fn == nil {
			errs = append(errs, fmt.Sprintf("helper %s: no function", n))
		}
	}
	errs = append(errs, validateTools(c.Tools)...)
	if len(errs) > 0 {
		return fmt.Errorf("contract %s: %s", c.Name, strings.Join(errs, "; "))
	}
	return nil
}

// checkConst validates a constant's value (plain Go, as FromStarlark makes
// it, or a Go default) and returns it normalized.
func checkConst(k ConstSpec, v any) (any, error) {
	nv, err := normalize(v)
	if err != nil {
		return nil, err
	}
	switch k.Type {
	case TypeString, TypeTemplate:
		s, ok := nv.(string)
		if !ok {
			return nil, fmt.Errorf("want a string, got %s", describe(nv))
		}
		if k.Type == TypeTemplate {
			if err := checkTemplate(s, k.Fields); err != nil {
				return nil, err
			}
		}
	case TypeInt:
		i, ok := nv.(int64)
		if !ok {
			return nil, fmt.Errorf("want an int, got %s", describe(nv))
		}
		if k.Min != nil && i < *k.Min {
			return nil, fmt.Errorf("%d is below the minimum %d", i, *k.Min)
		}
		if k.Max != nil && i > *k.Max {
			return nil, fmt.Errorf("%d is above the maximum %d", i, *k.Max)
		}
	case TypeFloat:
		switch f := nv.(type) {
		case float64:
			if !isFiniteNumber(f) {
				return nil, fmt.Errorf("want a finite float, got %v", f)
			}
		case int64:
			nv = float64(f)
		default:
			return nil, fmt.Errorf("want a float, got %s", describe(nv))
		}
	case TypeBool:
		if _, ok := nv.(bool); !ok {
			return nil, fmt.Errorf("want a bool, got %s", describe(nv))
		}
	case TypeList:
		if _, ok := nv.([]any); !ok {
			return nil, fmt.Errorf("want a list, got %s", describe(nv))
		}
	case TypeDict:
		if _, ok := nv.(map[string]any); !ok {
			return nil, fmt.Errorf("want a dict, got %s", describe(nv))
		}
	default:
		return nil, fmt.Errorf("unknown constant type %q", k.Type)
	}
	if k.Shape != nil {
		if err := k.Shape.Validate(nv, k.Name); err != nil {
			return nil, err
		}
	}
	return nv, nil
}
