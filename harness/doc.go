// Package harness is the sandboxed runtime of harnesses: Starlark modules
// that supply the constants and hooks an episode loop calls (DESIGN §6).
//
// Contract:
//   - Load compiles a module, runs its top level once under a step limit and
//     a deadline, freezes its globals and checks them against a Contract:
//     known constants have their type and range, hooks are functions that
//     accept the contract's positional arguments. Any problem is a
//     *LoadError listing each one with file:line:col; suspicious extra names
//     are Warnings. A harness's ID is "sha256:<hex>" of its source bytes.
//   - The module sees Starlark's universe, the runtime's builtins (re over
//     RE2, json, math, truncate, dedent, a bounded range, defaults) and the
//     contract's helpers and constant defaults — nothing else: no load(), no
//     files, network, processes, clock or randomness. Recursion is off;
//     while, top-level control flow, sets and global reassignment are on.
//   - Call runs one hook on a thread of its own with its own step limit
//     and deadline (ctx can shorten it; both are checked between steps),
//     converts arguments and the result between plain Go and Starlark,
//     validates the result's Shape, and falls
//     back to the contract's Go default when the harness leaves the hook out.
//     Failures are *HookError, classified by ErrStepLimit, ErrDeadline,
//     ErrMemory, ErrRuntime, ErrBadResult; runtime errors carry the harness
//     position and the Starlark backtrace. A Harness is immutable and safe
//     for concurrent Calls.
//   - Copies: a harness hook gets fresh Starlark values it may change
//     freely: nothing it does reaches the caller. A Go default gets plain
//     Go (what a round trip through Starlark makes) that shares what was
//     plain already with the caller's values, so it must never modify its
//     arguments (DefaultFunc). A result may share maps and lists with the
//     arguments and the harness, so callers treat results as read-only.
//   - State is the episode state of Base's StateDoc; State.Dict is the one
//     place its keys are spelled, and MessageDict the one conversion of a
//     schemas.Message into harness values (MessagesFrom is its inverse).
//   - Every call is reported to the Recorder (Options.Recorder or
//     WithRecorder) as a CallRecord, which renders as a schemas.TraceEvent:
//     the hook, its arguments and result summarized, the Starlark steps or
//     "default", the time taken. A Go default's record names its state
//     argument without a summary ("should_stop(state)").
//   - Memory: Starlark has no memory limit. The step limit bounds how many
//     operations run, and the runtime bounds what it hands out: builtin
//     string results (MaxStringBytes), converted values (MaxValueBytes,
//     MaxValueItems), range(). A single Starlark operation can still
//     allocate up to 1 GiB (string or list repetition), and repeated
//     doubling (s = s + s) grows exponentially within few steps; set
//     Options.MaxHeapBytes to cancel code once the process heap passes a
//     bound, and run untrusted candidates in a process with a memory limit.
//
// The package imports schemas and nothing else of whale.
package harness
