package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"go.starlark.net/starlark"
)

// Thread-local keys through which builtins reach the call's context and
// limits.
const (
	localCtx    = "whale.ctx"
	localLimits = "whale.limits"
)

// heapCheckEvery is how many steps pass between two heap checks when
// Options.MaxHeapBytes is set; a check costs about a microsecond.
const heapCheckEvery = 4096

const maxPrintBytes = 4096

var errCallTimeout = errors.New("call timeout")

// callInfo is what one run of Starlark code used.
type callInfo struct {
	steps  uint64
	output string
}

// run executes f on a fresh thread under the step limit, the deadline and
// the heap limit, and turns a failure into a *HookError for hook (the
// harness position is filled in from the Starlark call stack).
func (h *Harness) run(ctx context.Context, hook string, maxSteps uint64, timeout time.Duration, info *callInfo, f func(*starlark.Thread) (starlark.Value, error)) (starlark.Value, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()

	var out strings.Builder
	th := &starlark.Thread{
		Name: hook,
		Print: func(_ *starlark.Thread, msg string) {
			if out.Len() < maxPrintBytes {
				out.WriteString(clip(msg, maxPrintBytes-out.Len()))
				out.WriteByte('\n')
			}
		},
	}
	th.SetLocal(localCtx, ctx)
	th.SetLocal(localLimits, &h.opts)

	var why atomic.Int32 // 1 steps, 2 heap
	if h.opts.MaxHeapBytes == 0 {
		th.SetMaxExecutionSteps(maxSteps)
		th.OnMaxSteps = func(t *starlark.Thread) {
			why.CompareAndSwap(0, 1)
			t.Cancel("step limit exceeded")
		}
	} else {
		th.SetMaxExecutionSteps(min(heapCheckEvery, maxSteps))
		th.OnMaxSteps = func(t *starlark.Thread) {
			if t.Steps >= maxSteps {
				why.CompareAndSwap(0, 1)
				t.Cancel("step limit exceeded")
				return
			}
			if heapBytes() > h.opts.MaxHeapBytes {
				why.CompareAndSwap(0, 2)
				t.Cancel("heap limit exceeded")
				return
			}
			t.SetMaxExecutionSteps(min(t.Steps+heapCheckEvery, maxSteps))
		}
	}
	stop := context.AfterFunc(ctx, func() { th.Cancel(context.Cause(ctx).Error()) })
	defer stop()

	v, err := f(th)
	if info != nil {
		info.steps = th.Steps
		info.output = out.String()
	}
	if err == nil && ctx.Err() != nil {
		// A helper that honours ctx may have returned early with a partial
		// result before the interpreter saw the cancellation.
		err = fmt.Errorf("Starlark computation cancelled: %w", context.Cause(ctx))
	}
	if err == nil {
		return v, nil
	}

	he := &HookError{Hook: hook, Harness: h.id, Steps: th.Steps, Msg: err.Error(), cause: err}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		he.Msg = ee.Msg
		he.Backtrace = ee.Backtrace()
		he.Pos = h.innermost(ee.CallStack)
	}
	switch {
	case why.Load() == 1:
		he.kind = ErrStepLimit
		he.Msg = fmt.Sprintf("ran more than %d steps (an endless loop?)", maxSteps)
	case why.Load() == 2:
		he.kind = ErrMemory
		he.Msg = fmt.Sprintf("the process heap passed %d bytes", h.opts.MaxHeapBytes)
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errCallTimeout):
		he.kind = ErrDeadline
		he.Msg = fmt.Sprintf("did not finish within %s", timeout)
	case ctx.Err() != nil:
		// The caller's context ended: its own deadline, or cancellation.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			he.kind = ErrDeadline
		}
		he.Msg = "cancelled: " + context.Cause(ctx).Error()
		he.cause = errors.Join(ctx.Err(), err)
	default:
		he.kind = ErrRuntime
	}
	return nil, he
}

// innermost is the deepest frame of the stack that lies in the harness file
// (builtins have no position of their own).
func (h *Harness) innermost(stack starlark.CallStack) Pos {
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].Pos.Filename() == h.file {
			return posOf(stack[i].Pos)
		}
	}
	return Pos{File: h.file}
}

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Call runs a hook with args (plain Go values, see ToStarlark) and returns
// its result as plain Go (see FromStarlark), validated against the hook's
// declared shape. When the harness does not define the hook the contract's
// Go default runs instead. Every call, harness or default, is reported to
// the recorder. Errors are *HookError.
func (h *Harness) Call(ctx context.Context, hook string, args ...any) (any, error) {
	spec, ok := h.contract.Hook(hook)
	if !ok {
		return nil, fmt.Errorf("call %s: %w: contract %s has no hook %s", hook, ErrUnknownHook, h.contract.Name, hook)
	}
	if len(args) != len(spec.Params) {
		return nil, fmt.Errorf("call %s: %w: takes %d arguments (%s), got %d", hook, ErrBadArgs, len(spec.Params), strings.Join(spec.Params, ", "), len(args))
	}
	start := time.Now()
	var (
		result any
		err    error
		info   callInfo
	)
	fn := h.hooks[hook]
	if fn != nil {
		result, err = h.callStarlark(ctx, spec, fn, args, &info)
	} else {
		result, err = h.callDefault(ctx, spec, args)
	}
	if h.recorder != nil {
		rec := CallRecord{
			Hook:     hook,
			Default:  fn == nil,
			Duration: time.Since(start),
			Steps:    info.steps,
			Args:     summarizeArgs(spec.Params, args),
			Output:   info.output,
			Err:      err,
		}
		if err == nil {
			rec.Result = Summarize(result, summaryLen)
		}
		h.recorder(rec)
	}
	return result, err
}

func (h *Harness) callStarlark(ctx context.Context, spec HookSpec, fn *starlark.Function, args []any, info *callInfo) (any, error) {
	b := newBudget(h.opts.MaxValueBytes, h.opts.MaxValueItems)
	sargs := make(starlark.Tuple, len(args))
	for i, a := range args {
		v, err := toStarlark(a, b, 0)
		if err != nil {
			return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("argument %s: %v", spec.Params[i], err), kind: ErrBadArgs}
		}
		sargs[i] = v
	}
	v, err := h.run(ctx, spec.Name, h.opts.MaxSteps, h.opts.CallTimeout, info, func(th *starlark.Thread) (starlark.Value, error) {
		return starlark.Call(th, fn, sargs, nil)
	})
	if err != nil {
		return nil, err
	}
	bad := func(msg string) error {
		return &HookError{Hook: spec.Name, Harness: h.id, Pos: posOf(fn.Position()), Steps: info.steps, Msg: msg, kind: ErrBadResult}
	}
	gv, err := fromStarlark(v, newBudget(h.opts.MaxValueBytes, h.opts.MaxValueItems), 0)
	if err != nil {
		return nil, bad(fmt.Sprintf("returned %s: %v", v.Type(), err))
	}
	if err := spec.Returns.Validate(gv, "result"); err != nil {
		return nil, bad(fmt.Sprintf("must return %s: %v", spec.Returns, err))
	}
	return gv, nil
}

func (h *Harness) callDefault(ctx context.Context, spec HookSpec, args []any) (any, error) {
	nargs := make([]any, len(args))
	for i, a := range args {
		v, err := normalize(a)
		if err != nil {
			return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("argument %s: %v", spec.Params[i], err), kind: ErrBadArgs}
		}
		nargs[i] = v
	}
	v, err := spec.Default(ctx, h, nargs)
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: "default: " + err.Error(), kind: ErrRuntime, cause: err}
	}
	gv, err := normalize(v)
	if err == nil {
		err = spec.Returns.Validate(gv, "result")
	}
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("default must return %s: %v", spec.Returns, err), kind: ErrBadResult}
	}
	return gv, nil
}
