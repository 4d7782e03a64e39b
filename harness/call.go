package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"slices"
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
	if !conforms(spec.Returns, gv) {
		if err := spec.Returns.Validate(gv, "result"); err != nil {
			return nil, bad(fmt.Sprintf("must return %s: %v", spec.Returns, err))
		}
	}
	return gv, nil
}

// callDefault runs the contract's Go default. Arguments already in plain
// form (what FromStarlark makes: nil, bool, int64, float64, string, []any,
// map[string]any) are passed as they are, and so is a plain result; only
// other values are converted (see normalize). Defaults therefore must not
// modify their arguments, and none does: copying the episode state for
// every default call cost more CPU than the rest of the call.
func (h *Harness) callDefault(ctx context.Context, spec HookSpec, args []any) (any, error) {
	var nargs []any
	for i, a := range args {
		if isPlain(a) {
			continue
		}
		if nargs == nil {
			nargs = append(make([]any, 0, len(args)), args...)
		}
		v, err := normalize(a)
		if err != nil {
			return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("argument %s: %v", spec.Params[i], err), kind: ErrBadArgs}
		}
		nargs[i] = v
	}
	if nargs == nil {
		nargs = args
	}
	v, err := spec.Default(ctx, h, nargs)
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: "default: " + err.Error(), kind: ErrRuntime, cause: err}
	}
	gv := v
	if !isPlain(v) {
		gv, err = normalize(v)
	}
	if err == nil && !conforms(spec.Returns, gv) {
		err = spec.Returns.Validate(gv, "result")
	}
	if err != nil {
		return nil, &HookError{Hook: spec.Name, Harness: h.id, Msg: fmt.Sprintf("default must return %s: %v", spec.Returns, err), kind: ErrBadResult}
	}
	return gv, nil
}

// isPlain is plain under normalize's limits.
func isPlain(v any) bool {
	b := budget{maxBytes: DefaultMaxValueBytes, maxItems: DefaultMaxValueItems}
	return plain(v, &b, 0)
}

// plain reports whether v is already what normalize would make of it, and
// within budget b: then normalize's copy can be skipped.
func plain(v any, b *budget, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch x := v.(type) {
	case nil, bool, int64, float64:
		return true
	case string:
		return b.addBytes(len(x)) == nil
	case []any:
		if b.addItems(len(x)) != nil {
			return false
		}
		for _, e := range x {
			if !plain(e, b, depth+1) {
				return false
			}
		}
		return true
	case map[string]any:
		if b.addItems(len(x)) != nil {
			return false
		}
		for k, e := range x {
			if b.addBytes(len(k)) != nil || !plain(e, b, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// conforms reports whether v certainly conforms to s, without allocating;
// false means "ask s.Validate", which also says why. It knows the shapes
// of this package; Validate's messages build a path string for every
// element, which cost more than the rest of a default call.
func conforms(s Shape, v any) bool {
	switch s := s.(type) {
	case kindShape:
		return s.check(v)
	case Enum:
		str, ok := v.(string)
		return ok && slices.Contains(s, str)
	case ListOf:
		l, ok := v.([]any)
		if !ok || len(l) < s.Min || (s.Max > 0 && len(l) > s.Max) {
			return false
		}
		for _, e := range l {
			if !conforms(s.Elem, e) {
				return false
			}
		}
		return true
	case DictOf:
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for _, e := range m {
			if !conforms(s.Elem, e) {
				return false
			}
		}
		return true
	case Record:
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		present := 0
		for _, f := range s.Fields {
			fv, ok := m[f.Name]
			if !ok {
				if f.Optional {
					continue
				}
				return false
			}
			present++
			if !conforms(f.Shape, fv) {
				return false
			}
		}
		// Field names are distinct, so any key beyond those present is
		// one the record does not name.
		return s.Open || len(m) == present
	case Tagged:
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		tag, ok := m[s.Tag].(string)
		if !ok {
			return false
		}
		variant, ok := s.Variants[tag]
		return ok && conforms(variant, v)
	case OneOf:
		for _, alt := range s {
			if conforms(alt, v) {
				return true
			}
		}
	}
	return false
}
