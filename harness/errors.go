package harness

import (
	"errors"
	"fmt"
	"strings"

	"go.starlark.net/syntax"
)

// Sentinel errors classify why a hook call or a load failed; test them with
// errors.Is. The episode loop treats all of them as a failure of the harness
// (the episode ends with its error), never of the model.
var (
	// ErrStepLimit: the Starlark code ran more steps than Options.MaxSteps.
	ErrStepLimit = errors.New("step limit exceeded")
	// ErrDeadline: the code ran past Options.CallTimeout (or LoadTimeout).
	ErrDeadline = errors.New("deadline exceeded")
	// ErrMemory: the code passed a memory limit: one operation would have
	// made a value larger than Options.MaxAllocBytes (or an int of more
	// than MaxIntBits), the call allocated more than MaxMemoryBytes, a
	// value nested deeper than MaxNesting, one comparison, membership
	// test or hash would visit more than MaxCompareWork elements (a sort
	// MaxSortWork), or the process heap passed MaxHeapBytes. The error
	// names the limit.
	ErrMemory = errors.New("memory limit exceeded")
	// ErrRuntime: the Starlark code failed (division by zero, missing key,
	// fail(), a builtin rejecting its arguments, ...).
	ErrRuntime = errors.New("starlark error")
	// ErrBadResult: the hook returned a value of the wrong shape.
	ErrBadResult = errors.New("bad hook result")
	// ErrUnknownHook: Call named a hook the contract does not declare.
	// This is a bug of the caller.
	ErrUnknownHook = errors.New("unknown hook")
	// ErrBadArgs: Call passed the wrong number of arguments, or one that
	// cannot be converted or is too large. This is a bug of the caller.
	ErrBadArgs = errors.New("bad hook arguments")
	// ErrInvalid: the harness source does not compile or breaks the contract.
	ErrInvalid = errors.New("invalid harness")
)

// Pos is a position in a harness source file. Line and Col start at 1; zero
// means unknown.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

func posOf(p syntax.Position) Pos {
	if !p.IsValid() {
		return Pos{}
	}
	return Pos{File: p.Filename(), Line: int(p.Line), Col: int(p.Col)}
}

// Problem is one error or warning about a harness, at a position.
type Problem struct {
	Pos Pos    `json:"pos"`
	Msg string `json:"msg"`
}

func (p Problem) String() string {
	if p.Pos == (Pos{}) {
		return p.Msg
	}
	return p.Pos.String() + ": " + p.Msg
}

// LoadError reports every problem found while loading a harness: a syntax
// error, unresolved names, a failing top level, or contract violations. It
// matches ErrInvalid (and ErrStepLimit/ErrDeadline/ErrRuntime when the top
// level itself failed) and unwraps to the underlying syntax.Error,
// resolve.ErrorList or *starlark.EvalError when there is one.
type LoadError struct {
	File     string
	Problems []Problem
	// Backtrace is the Starlark call stack when the top level failed at run time.
	Backtrace string
	kind      error
	cause     error
}

func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "load harness %s: ", e.File)
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *LoadError) Unwrap() []error {
	errs := []error{ErrInvalid}
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// HookError reports a failed hook call: where in the harness it failed, why,
// and the Starlark backtrace. It matches one of ErrStepLimit, ErrDeadline,
// ErrMemory, ErrRuntime, ErrBadResult (or context.Canceled when the caller
// cancelled) and unwraps to the *starlark.EvalError when there is one.
type HookError struct {
	Hook    string
	Harness string // harness ID
	// Pos is the innermost harness position on the stack when the code
	// failed, or the hook's definition for a bad result.
	Pos       Pos
	Msg       string
	Backtrace string
	Steps     uint64
	kind      error
	cause     error
}

func (e *HookError) Error() string {
	if e.Pos == (Pos{}) {
		return fmt.Sprintf("hook %s: %s", e.Hook, e.Msg)
	}
	return fmt.Sprintf("hook %s (%s): %s", e.Hook, e.Pos, e.Msg)
}

func (e *HookError) Unwrap() []error {
	errs := []error{}
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}
