package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"time"

	"go.starlark.net/starlark"
)

// Thread-local key through which builtins reach the call's context and
// limits (see ctxOf and limitsOf).
const localCall = "whale.call"

// heapCheckEvery is how many steps pass between two heap checks when
// Options.MaxHeapBytes is set; a check costs about a microsecond.
const heapCheckEvery = 4096

// pollEvery is how many steps pass between two looks at the clock and the
// caller's context: a look costs a few tens of nanoseconds, and a hook
// notices its deadline or a cancellation within some 20µs of Starlark
// work.
const pollEvery = 1024

const maxPrintBytes = 4096

var errCallTimeout = errors.New("call timeout")

// Why a runner stopped its thread.
const (
	stopSteps    = 1 + iota // the step limit
	stopHeap                // the heap limit
	stopDeadline            // the call's timeout
	stopParent              // the caller's context ended
)

// callInfo is what one run of Starlark code used.
type callInfo struct {
	steps  uint64
	output string
}

// A runner is a Starlark thread and what one call needs around it:
// limits, the captured print output.
//
// Neither the deadline nor the caller's context is watched from another
// goroutine (a timer, context.AfterFunc): the thread looks at the clock
// and the context every pollEvery steps, and when the code returns.
// Builtins that wait get a context (ctxOf) that ends with either, and a
// helper checks it when it returns. Starlark notices a cancellation only
// between steps in any case, so a builtin that blocks without honouring
// its context held a call past its deadline before as well.
type runner struct {
	th starlark.Thread

	// Set for each call.
	opts      *Options
	parent    context.Context
	deadline  time.Time
	maxSteps  uint64
	checkHeap bool
	nextHeap  uint64          // the step count of the next heap check
	ctx       context.Context // parent with the deadline, made by ctxOf
	cancel    context.CancelFunc
	why       int32 // a stop* value: why the thread was cancelled
	out       []byte
}

func newRunner() *runner {
	r := &runner{}
	r.th.Print = r.print
	r.th.OnMaxSteps = r.onMaxSteps
	r.th.SetLocal(localCall, r)
	return r
}

func (r *runner) print(_ *starlark.Thread, msg string) {
	if len(r.out) < maxPrintBytes {
		r.out = append(r.out, clip(msg, maxPrintBytes-len(r.out))...)
		r.out = append(r.out, '\n')
	}
}

// onMaxSteps runs on the thread every pollEvery steps and at the step
// limit.
func (r *runner) onMaxSteps(t *starlark.Thread) {
	stop := func(why int32, reason string) {
		r.why = why
		t.Cancel(reason)
	}
	switch {
	case t.Steps >= r.maxSteps:
		stop(stopSteps, "step limit exceeded")
	case time.Now().After(r.deadline):
		stop(stopDeadline, errCallTimeout.Error())
	case r.parent.Err() != nil:
		stop(stopParent, context.Cause(r.parent).Error())
	case r.checkHeap && t.Steps >= r.nextHeap && heapBytes() > r.opts.MaxHeapBytes:
		stop(stopHeap, "heap limit exceeded")
	default:
		if r.checkHeap && t.Steps >= r.nextHeap {
			r.nextHeap = t.Steps + heapCheckEvery
		}
		t.SetMaxExecutionSteps(min(t.Steps+pollEvery, r.maxSteps))
	}
}

// context is the call's context for builtins that wait: the caller's,
// ending at the call's deadline. It is made on first use, since most hooks
// call no such builtin.
func (r *runner) context() context.Context {
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithDeadlineCause(r.parent, r.deadline, errCallTimeout)
	}
	return r.ctx
}

// stopped reports why the call must end as failed although the code may
// have returned: it ran past its deadline (a helper that honours its
// context may return early with a partial result), or the caller gave up.
func (r *runner) stopped() int32 {
	switch {
	case r.why != 0:
		return r.why
	case r.ctx != nil && r.ctx.Err() != nil && errors.Is(context.Cause(r.ctx), errCallTimeout), time.Now().After(r.deadline):
		return stopDeadline
	case r.ctx != nil && r.ctx.Err() != nil, r.parent.Err() != nil:
		return stopParent
	}
	return 0
}

// run executes f on a thread under the step limit, the deadline and the
// heap limit, and turns a failure into a *HookError for hook (the harness
// position is filled in from the Starlark call stack).
func (h *Harness) run(ctx context.Context, hook string, maxSteps uint64, timeout time.Duration, info *callInfo, f func(*starlark.Thread) (starlark.Value, error)) (starlark.Value, error) {
	r := newRunner()
	r.opts = &h.opts
	r.parent = ctx
	r.deadline = time.Now().Add(timeout)
	r.maxSteps = maxSteps
	r.checkHeap = h.opts.MaxHeapBytes > 0
	r.nextHeap = heapCheckEvery
	th := &r.th
	th.Name = hook
	th.SetMaxExecutionSteps(min(pollEvery, maxSteps))

	v, err := f(th)
	why := r.stopped()
	if r.cancel != nil {
		r.cancel()
		r.cancel, r.ctx = nil, nil
	}
	if info != nil {
		info.steps = th.Steps
		if len(r.out) > 0 {
			info.output = string(r.out)
		}
	}
	if err == nil && why == 0 {
		return v, nil
	}

	cause := context.Cause(ctx)
	if why == stopDeadline {
		cause = errCallTimeout
	}
	if err == nil {
		err = fmt.Errorf("Starlark computation cancelled: %w", cause)
	}
	he := &HookError{Hook: hook, Harness: h.id, Steps: th.Steps, Msg: err.Error(), cause: err}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		he.Msg = ee.Msg
		he.Backtrace = ee.Backtrace()
		he.Pos = h.innermost(ee.CallStack)
	}
	switch why {
	case stopSteps:
		he.kind = ErrStepLimit
		he.Msg = fmt.Sprintf("ran more than %d steps (an endless loop?)", maxSteps)
	case stopHeap:
		he.kind = ErrMemory
		he.Msg = fmt.Sprintf("the process heap passed %d bytes", h.opts.MaxHeapBytes)
	case stopDeadline:
		he.kind = ErrDeadline
		he.Msg = fmt.Sprintf("did not finish within %s", timeout)
	case stopParent:
		// The caller's context ended: its own deadline, or cancellation.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			he.kind = ErrDeadline
		}
		he.Msg = "cancelled: " + cause.Error()
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

// Call runs a hook with args (Go values, see ToStarlark; the episode
// state as State.Dict makes it) and returns its result as plain Go (see
// FromStarlark), validated against the hook's declared shape. When the
// harness does not define the hook the contract's Go default runs instead,
// with the arguments converted to plain Go as a round trip through
// Starlark would make them (sharing what was plain already: see
// callDefault). A harness hook gets its own copy of the arguments. The
// result may share maps and lists with the arguments and the harness:
// callers must not modify it. Every call, harness or default, is reported to the
// recorder. Errors are *HookError.
func (h *Harness) Call(ctx context.Context, hook string, args ...any) (any, error) {
	c, ok := h.calls[hook]
	if !ok {
		return nil, fmt.Errorf("call %s: %w: contract %s has no hook %s", hook, ErrUnknownHook, h.contract.Name, hook)
	}
	if len(args) != len(c.spec.Params) {
		return nil, fmt.Errorf("call %s: %w: takes %d arguments (%s), got %d", hook, ErrBadArgs, len(c.spec.Params), strings.Join(c.spec.Params, ", "), len(args))
	}
	start := time.Now()
	var (
		result any
		err    error
		info   callInfo
	)
	if c.fn != nil {
		result, err = h.callStarlark(ctx, c, args, &info)
	} else {
		result, err = h.callDefault(ctx, c, args)
	}
	if h.recorder != nil {
		rec := CallRecord{Hook: hook, Default: c.fn == nil, Duration: time.Since(start), Steps: info.steps, Output: info.output, Err: err}
		rec.render(c.spec.Params, args, result)
		h.recorder(rec)
	}
	return result, err
}

// badArg is the error of a call whose argument i cannot be handed to the
// hook (too big, or not convertible).
func (h *Harness) badArg(c *hookCall, i int, err error) *HookError {
	return &HookError{Hook: c.spec.Name, Harness: h.id, Msg: fmt.Sprintf("argument %s: %v", c.spec.Params[i], err), kind: ErrBadArgs}
}

func (h *Harness) callStarlark(ctx context.Context, c *hookCall, args []any, info *callInfo) (any, error) {
	spec, fn := &c.spec, c.fn
	b := newBudget(h.opts.MaxValueBytes, h.opts.MaxValueItems)
	sargs := make(starlark.Tuple, len(args))
	for i, a := range args {
		v, err := toStarlark(a, b, 0)
		if err != nil {
			return nil, h.badArg(c, i, err)
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

// callDefault runs the contract's Go default on plain forms of the
// arguments, counted against the same budget as a harness hook's, and
// validates its result as a harness hook's. What is plain already (the
// task, the last action) is handed over, not copied: a default must not
// modify its arguments (DefaultFunc). Copying them cost a third of a
// default-harness episode's CPU, and the rollout stage fell to 0.61 of a
// bare HTTP loop's rate against a zero-latency server (0.70 is the floor).
func (h *Harness) callDefault(ctx context.Context, c *hookCall, args []any) (any, error) {
	spec := &c.spec
	n := normalizer{b: newBudget(h.opts.MaxValueBytes, h.opts.MaxValueItems), share: true}
	nargs := make([]any, len(args))
	for i, a := range args {
		v, _, err := n.conv(a, 0)
		if err != nil {
			return nil, h.badArg(c, i, err)
		}
		nargs[i] = v
	}
	v, err := spec.Default(ctx, h, nargs)
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: "default: " + err.Error(), kind: ErrRuntime, cause: err}
	}
	gv, _, err := normalizer{b: newBudget(0, 0), share: true}.conv(v, 0)
	if err == nil {
		err = spec.Returns.Validate(gv, "result")
	}
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("default must return %s: %v", spec.Returns, err), kind: ErrBadResult}
	}
	return gv, nil
}
