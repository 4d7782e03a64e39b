package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.starlark.net/starlark"
)

// Thread-local key through which builtins reach the call's context and
// limits (see ctxOf and limitsOf).
const localCall = "whale.call"

// heapCheckEvery is how many steps pass between two heap checks; a check
// costs about a microsecond.
const heapCheckEvery = 4096

// The bounded operations (guards.go) charge what they allocate, or the
// work they do, to the call; every pollBytes charged they look at the
// deadline and the caller's context, and every heapPollBytes at the heap,
// as onMaxSteps does between steps: one step that copies megabytes must
// not wait a thousand steps for the next look. Copying 1 MiB takes some
// 50 µs.
const (
	pollBytes     = 1 << 20
	heapPollBytes = 32 << 20
)

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
	allocated int64           // bytes the bounded operations charged
	sincePoll int64           // bytes charged since the last look at the clock
	sinceHeap int64           // bytes charged since the last heap check
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
	if t.Steps >= r.maxSteps {
		r.stop(t, stopSteps, "step limit exceeded")
		return
	}
	heap := r.checkHeap && t.Steps >= r.nextHeap
	if r.poll(t, heap) {
		return
	}
	if heap {
		r.nextHeap = t.Steps + heapCheckEvery
		r.sinceHeap = 0
	}
	t.SetMaxExecutionSteps(min(t.Steps+pollEvery, r.maxSteps))
}

func (r *runner) stop(t *starlark.Thread, why int32, reason string) {
	r.why = why
	t.Cancel(reason)
}

// poll looks at the deadline, the caller's context and, when heap is set,
// the process heap; it stops the thread and reports true when the call
// must end.
func (r *runner) poll(t *starlark.Thread, heap bool) bool {
	switch {
	case time.Now().After(r.deadline):
		r.stop(t, stopDeadline, errCallTimeout.Error())
	case r.parent.Err() != nil:
		r.stop(t, stopParent, context.Cause(r.parent).Error())
	case heap && heapOver(r.opts.MaxHeapBytes):
		r.stop(t, stopHeap, "heap limit exceeded")
	default:
		return false
	}
	return true
}

// charge counts n bytes that a bounded operation is about to allocate, or
// n units of its work, against the call's memory budget (MaxMemoryBytes
// when alloc is set), and looks at the clock, the context and the heap
// every so often. A non-nil error ends the operation: a limitError when
// the budget is spent, or the thread's stop (r.why says which).
func (r *runner) charge(t *starlark.Thread, n int64, alloc bool) error {
	if n <= 0 {
		return nil
	}
	if alloc {
		r.allocated += n
		if r.allocated > r.opts.MaxMemoryBytes {
			return memoryError("this call allocated more than %d bytes (MaxMemoryBytes); build long strings with \"\".join(parts), not += in a loop", r.opts.MaxMemoryBytes)
		}
	}
	r.sincePoll += n
	if alloc {
		r.sinceHeap += n
	}
	if r.sincePoll < pollBytes {
		return nil
	}
	r.sincePoll = 0
	heap := r.checkHeap && r.sinceHeap >= heapPollBytes
	if heap {
		r.sinceHeap = 0
	}
	if r.poll(t, heap) {
		return fmt.Errorf("Starlark computation cancelled: %s", t.Name)
	}
	return nil
}

// checkNow looks at the deadline and the caller's context before an
// operation that may take long (a regular expression over a large input):
// a loop of such calls must not run past its deadline until the next
// poll of the steps.
func (r *runner) checkNow(t *starlark.Thread) error {
	if r.poll(t, false) {
		return fmt.Errorf("Starlark computation cancelled: %s", t.Name)
	}
	return nil
}

// runnerOf is the runner of the call on th, or nil outside one.
func runnerOf(th *starlark.Thread) *runner {
	r, _ := th.Local(localCall).(*runner)
	if r == nil || r.opts == nil || r.parent == nil {
		return nil
	}
	return r
}

// charge charges the call running on th (see runner.charge); outside a
// call it does nothing.
func charge(th *starlark.Thread, n int64) error {
	if r := runnerOf(th); r != nil {
		return r.charge(th, n, true)
	}
	return nil
}

// work counts n units of work of a builtin (see runner.charge).
func work(th *starlark.Thread, n int64) error {
	if r := runnerOf(th); r != nil {
		return r.charge(th, n, false)
	}
	return nil
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
// position is filled in from the Starlark call stack). When watched, f
// runs on a goroutine of its own that the caller stops waiting for
// abandonAfter past the deadline (see watch): a goroutine a call costs
// some microseconds, ten times a trivial hook's call on a busy machine,
// so only the module's top level, run once a load, is watched.
func (h *Harness) run(ctx context.Context, hook string, maxSteps uint64, timeout time.Duration, watched bool, info *callInfo, f func(*starlark.Thread) (starlark.Value, error)) (starlark.Value, error) {
	r := newRunner()
	r.opts = &h.opts
	r.parent = ctx
	r.deadline = time.Now().Add(timeout)
	r.maxSteps = maxSteps
	r.checkHeap = h.opts.MaxHeapBytes > 0 && h.opts.MaxHeapBytes < math.MaxUint64
	r.nextHeap = heapCheckEvery
	th := &r.th
	th.Name = hook
	th.SetMaxExecutionSteps(min(pollEvery, maxSteps))

	var (
		v         starlark.Value
		err       error
		abandoned bool
	)
	if watched {
		v, err, abandoned = r.watch(ctx, th, f)
	} else {
		v, err = f(th)
	}
	if abandoned {
		// The thread is still running on its goroutine: nothing of the
		// runner or the thread may be read.
		return nil, &HookError{Hook: hook, Harness: h.id, kind: ErrDeadline, cause: errCallTimeout,
			Msg: fmt.Sprintf("did not return within %s of its deadline (%s) or cancellation: one operation ran on that cannot be interrupted; the call was abandoned", abandonAfter, timeout)}
	}
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
	var le *limitError
	if why == 0 && errors.As(err, &le) {
		he.kind = le.kind
	}
	switch why {
	case stopSteps:
		he.kind = ErrStepLimit
		he.Msg = fmt.Sprintf("ran more than %d steps (an endless loop?)", maxSteps)
	case stopHeap:
		he.kind = ErrMemory
		he.Msg = fmt.Sprintf("memory limit: the process heap passed %d bytes (MaxHeapBytes)", h.opts.MaxHeapBytes)
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
		if he.kind == nil {
			he.kind = ErrRuntime
		}
	}
	return nil, he
}

// abandonAfter is how long past its deadline, or its caller's
// cancellation, a call may run before the caller stops waiting for it.
// Starlark notices both only between steps, and the runtime's bounded
// operations (comparisons and hashes included, compare.go) return within
// seconds; a step that runs longer than expected (an operation the
// runtime does not bound) cannot be interrupted by Go. The caller then
// gets an ErrDeadline and goes on; the thread, cancelled, ends on its own
// goroutine when that step does.
var abandonAfter = 10 * time.Second

// watch runs f on a goroutine of its own and waits for it, or until
// abandonAfter past the deadline or the caller's cancellation (abandoned:
// f is still running). A panic in f is raised again here.
func (r *runner) watch(ctx context.Context, th *starlark.Thread, f func(*starlark.Thread) (starlark.Value, error)) (v starlark.Value, err error, abandoned bool) {
	type result struct {
		v        starlark.Value
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			res.panicked = recover()
			done <- res
		}()
		res.v, res.err = f(th)
	}()
	finish := func(res result) (starlark.Value, error, bool) {
		if res.panicked != nil {
			panic(res.panicked)
		}
		return res.v, res.err, false
	}
	timer := time.NewTimer(time.Until(r.deadline) + abandonAfter)
	defer timer.Stop()
	select {
	case res := <-done:
		return finish(res)
	case <-timer.C:
	case <-ctx.Done():
		grace := time.NewTimer(abandonAfter)
		defer grace.Stop()
		select {
		case res := <-done:
			return finish(res)
		case <-grace.C:
		}
	}
	th.Cancel("abandoned: past its deadline")
	return nil, nil, true
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

// lastForcedGC is when heapOver last collected garbage (UnixNano).
var lastForcedGC atomic.Int64

// heapOver reports whether the process heap holds more than limit bytes
// of objects. Garbage not yet collected counts in the heap, so before
// blaming the harness it collects once, and then at most every 100 ms
// across the process (a collection of a large heap takes a while).
func heapOver(limit uint64) bool {
	if heapBytes() <= limit {
		return false
	}
	now := time.Now().UnixNano()
	if last := lastForcedGC.Load(); now-last > int64(100*time.Millisecond) && lastForcedGC.CompareAndSwap(last, now) {
		runtime.GC()
	}
	return heapBytes() > limit
}

var (
	defaultHeapOnce sync.Once
	defaultHeap     uint64
)

// DefaultMaxHeapBytes is the heap limit of harness code when
// Options.MaxHeapBytes is zero: three quarters of the memory this process
// may use (the least of the machine's memory, the cgroup's limit and
// GOMEMLIMIT), or no limit where none of these is known.
func DefaultMaxHeapBytes() uint64 {
	defaultHeapOnce.Do(func() {
		avail := uint64(math.MaxUint64)
		if n := memTotal(); n > 0 {
			avail = min(avail, n)
		}
		for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
			if b, err := os.ReadFile(f); err == nil {
				if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
					avail = min(avail, n)
				}
			}
		}
		if n := debug.SetMemoryLimit(-1); n > 0 && n < math.MaxInt64 {
			avail = min(avail, uint64(n))
		}
		if avail == math.MaxUint64 {
			defaultHeap = math.MaxUint64 // unknown: no heap limit
			return
		}
		defaultHeap = avail / 4 * 3
	})
	return defaultHeap
}

// memTotal is the machine's memory from /proc/meminfo, 0 if unknown.
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					if len(f) > 1 && strings.EqualFold(f[1], "kB") {
						n *= 1024
					}
					return n
				}
			}
		}
	}
	return 0
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
	v, err := h.run(ctx, spec.Name, h.opts.MaxSteps, h.opts.CallTimeout, false, info, func(th *starlark.Thread) (starlark.Value, error) {
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
