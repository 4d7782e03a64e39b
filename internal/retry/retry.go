// Package retry is whale's one retry policy: exponential backoff with full
// jitter, a server's Retry-After honoured up to a cap, and one
// classification of HTTP statuses and transport errors.
//
// Contract:
//
//   - Do calls op until it returns nil, returns an error marked Permanent,
//     has been called Policy.Attempts times, or ctx ends. op must be safe to
//     repeat. Every other error is retried.
//   - The wait before retry n+1 (n from 0) is uniform in
//     [0, min(Max, Base·2^n)]. An error marked After waits at least the
//     server's delay, capped by RetryAfterCap.
//   - ctx is honoured between tries: a wait ends when ctx does. A try that
//     fails after ctx ended is not repeated.
//   - Do returns op's error as it was (less an outermost Permanent mark)
//     when it is permanent; otherwise an *Error that holds the last error,
//     the number of tries and, when ctx ended the retries, ctx's cause.
//
// Callers keep their own messages and log lines: OnRetry reports each
// retry, and *Error carries what a message needs.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Policy says how often and how patiently a failing operation is retried.
// The zero value tries once.
type Policy struct {
	// Attempts is the number of tries in all; less than 1 means 1.
	Attempts int
	// Base is the ceiling of the first wait; each next ceiling doubles.
	// 0 or less means no wait.
	Base time.Duration
	// Max caps the ceiling of a wait; 0 or less means no cap.
	Max time.Duration
}

// Backoff is the wait before retry n+1 (n counts from 0): a random
// duration in [0, min(Max, Base·2^n)]. Full jitter spreads out callers
// that failed together.
func (p Policy) Backoff(n int) time.Duration {
	c := p.ceiling(n)
	if c <= 0 {
		return 0
	}
	return time.Duration(rand.Uint64N(uint64(c) + 1))
}

// ceiling is min(Max, Base·2^n), saturating instead of overflowing.
func (p Policy) ceiling(n int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	shift := min(max(n, 0), 62)
	d := p.Base << shift
	if d>>shift != p.Base || d <= 0 {
		d = math.MaxInt64
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// RetryAfterCap is the longest a server's Retry-After is waited for: the
// larger of Max and one minute.
func (p Policy) RetryAfterCap() time.Duration { return max(p.Max, time.Minute) }

// Permanent marks err as not worth retrying: Do returns it (unmarked) at
// once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

type permanent struct{ err error }

func (e *permanent) Error() string { return e.err.Error() }
func (e *permanent) Unwrap() error { return e.err }

// IsPermanent reports whether err carries the Permanent mark.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}

// After marks err, a retryable failure, with the wait the server asked
// for (its Retry-After); Do waits at least that long, up to
// RetryAfterCap, before the next try. After(nil, d) is nil, and d <= 0
// leaves err as it is.
func After(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &after{err, d}
}

type after struct {
	err error
	d   time.Duration
}

func (e *after) Error() string { return e.err.Error() }
func (e *after) Unwrap() error { return e.err }

// Error is what Do returns when it gives up on a retryable error.
type Error struct {
	// Attempts is the number of tries made.
	Attempts int
	// Err is the last try's error.
	Err error
	// Cause is context.Cause of Do's ctx when ctx ended the retries; nil
	// when the tries ran out.
	Cause error
}

func (e *Error) Error() string {
	switch {
	case e.Cause != nil:
		return fmt.Sprintf("%v (retries stopped after %d %s: %v)", e.Err, e.Attempts, plural(e.Attempts), e.Cause)
	case e.Attempts > 1:
		return fmt.Sprintf("gave up after %d attempts: %v", e.Attempts, e.Err)
	}
	// One try is no retry: its error says it all.
	return e.Err.Error()
}

func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

func plural(n int) string {
	if n == 1 {
		return "attempt"
	}
	return "attempts"
}

// Event describes one retry, for OnRetry.
type Event struct {
	Attempt int           // the try that failed, from 1
	Wait    time.Duration // the wait before the next try
	Err     error         // the failed try's error
}

// Option changes how Do runs.
type Option func(*options)

type options struct {
	onRetry func(Event)
	// sleep waits d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

// OnRetry calls f before each wait, in Do's goroutine: the place for a
// caller's log line.
func OnRetry(f func(Event)) Option { return func(o *options) { o.onRetry = f } }

// Do runs op as the package comment says. op receives ctx.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error, opts ...Option) error {
	o := options{sleep: sleep}
	for _, f := range opts {
		f(&o)
	}
	attempts := max(p.Attempts, 1)
	for n := 1; ; n++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if IsPermanent(err) {
			return unmark(err)
		}
		if ctx.Err() != nil {
			// A try cut short by the caller's deadline looks transient.
			return &Error{Attempts: n, Err: unmark(err), Cause: context.Cause(ctx)}
		}
		if n >= attempts {
			return &Error{Attempts: n, Err: unmark(err)}
		}
		wait := p.Backoff(n - 1)
		var ae *after
		if errors.As(err, &ae) {
			wait = max(wait, min(ae.d, p.RetryAfterCap()))
		}
		if o.onRetry != nil {
			o.onRetry(Event{Attempt: n, Wait: wait, Err: unmark(err)})
		}
		if cause := o.sleep(ctx, wait); cause != nil {
			return &Error{Attempts: n, Err: unmark(err), Cause: cause}
		}
	}
}

// unmark drops the outermost mark, so that callers get their error back
// as they made it. A mark under the caller's own wrapping stays there; it
// changes neither the message nor errors.Is.
func unmark(err error) error {
	switch e := err.(type) {
	case *permanent:
		return e.err
	case *after:
		return e.err
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
