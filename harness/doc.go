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
//   - Memory: Starlark has no memory limit of its own, and one of its
//     operations could allocate gigabytes in a step ([0] * n, "x" * n, s +
//     s doubled, "%s" % v, str() of a list sharing one long string).
//     Load rewrites the syntax tree (rewrite.go) so that every operation
//     that can make a value larger than its operands — the operators + *
//     % | - << and their augmented forms, indexing, slicing, *args — calls
//     a guard (guards.go), and it predeclares bounded versions of the
//     builtins and methods that can (str, repr, print, fail, int, list,
//     tuple, sorted, dict, set, zip, enumerate, getattr, s.join, s.format,
//     s.replace, s.split, l.extend, d.update, d.items, json, re,
//     truncate, dedent). Each computes the size of its result first and
//     refuses a value above MaxAllocBytes (16 MiB; 1M list elements),
//     charges what it makes to the call's budget (MaxMemoryBytes, 1 GiB
//     in all, garbage included) and, every MiB, looks at the deadline and
//     the caller's context, and every few dozen MiB at the process heap
//     (MaxHeapBytes, three quarters of the memory available; also checked
//     every few thousand steps). json.decode reads at most MaxNesting
//     levels, and str(), repr() and json.encode walk at most as many;
//     ints are bounded by MaxIntBits; re refuses inputs whose size times
//     the pattern's program passes a bound (about 3 s of matching) and
//     looks at the deadline before each large match. Errors of these
//     limits match ErrMemory and name the limit. The step limit bounds
//     the rest (an append or a comprehension element per step).
//   - Comparing and hashing: Starlark compares two values and hashes a
//     dict key or set element in one step, visiting nested lists and
//     tuples as often as they are reached (B == C for B = [a]*1000000
//     and C = [list(a)]*1000000, a = [0]*1000000, is 10¹² comparisons;
//     t == t or {t: 1} for t = (((1,)*1000,)*1000,)*1000 is 10⁹). The
//     rewrite routes comparisons (== != < <= > >=), in and not in, dict
//     keys ({k: v}, comprehensions, d[k] = v) through guards, and the
//     bounded builtins and methods (sorted, min, max, dict, set, d[k],
//     d.get, d.setdefault, d.pop, d.update, s.add, s.remove, s.discard,
//     s.union and its kind, l.index, l.remove, | & ^ - of sets) check too
//     (compare.go): each first walks its operands as the operation will,
//     stopping where it stops, counts the elements visited (a shared one
//     each time it is reached), refuses past MaxCompareWork (2²²; all
//     the comparisons of one sort, min or max past MaxSortWork) with an
//     error that matches ErrMemory and names the limit, charges the count
//     to the call (the deadline and the context are looked at every
//     million), and then lets Starlark do it. Operands that are cheap —
//     not both containers, or a literal, a number, None — cost one look,
//     or no guard at all. Not bounded: lookups in a dict whose keys were
//     made to share one hash (each compares with all of them); a dict
//     or set growing rehashes its keys in one step (no more work than
//     inserting them took, which was charged). Load runs the top level
//     on a goroutine of its own and stops waiting for it abandonAfter
//     past its deadline (freezing the globals is bounded by checkFreeze),
//     a backstop for a step that still runs long (one regular expression
//     match takes up to some seconds); a hook call runs on its caller's
//     goroutine (a goroutine a call would cost more than the call).
//
// The package imports schemas and nothing else of whale.
package harness
