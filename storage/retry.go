package storage

import (
	"context"
	"log/slog"
	"time"

	"github.com/whalerun/whale/internal/retry"
)

// RetryPolicy says how transient errors are retried: exponential backoff
// from Base, capped at Max, with full jitter, at most Attempts tries in all
// (internal/retry's policy).
type RetryPolicy struct {
	Attempts int
	Base     time.Duration
	Max      time.Duration
	// AttemptTimeout bounds one try of a request whose size is bounded
	// (stat, delete, one list page, an exclusive create), so that a request
	// that hangs is retried instead of waiting for ever. Streaming reads and
	// writes, Put and ReadAll have no such bound: their duration grows with
	// the object. 0 means no bound.
	AttemptTimeout time.Duration
}

// DefaultRetry suits object stores: about 30 s of patience in all.
var DefaultRetry = RetryPolicy{Attempts: 8, Base: 200 * time.Millisecond, Max: 10 * time.Second, AttemptTimeout: time.Minute}

func (p RetryPolicy) policy() retry.Policy {
	return retry.Policy{Attempts: p.Attempts, Base: p.Base, Max: p.Max}
}

// do runs op until it succeeds, fails permanently (not Transient), runs
// out of attempts or ctx ends. op must be safe to repeat. A permanent
// error comes back as op returned it; otherwise the *retry.Error wraps
// op's last error and, when ctx ended the wait, ctx's cause.
func (p RetryPolicy) do(ctx context.Context, what string, op func() error) error {
	return retry.Do(ctx, p.policy(), func(context.Context) error {
		err := op()
		if err != nil && !Transient(err) {
			return retry.Permanent(err)
		}
		return err
	}, retry.OnRetry(func(e retry.Event) {
		slog.Debug("storage: transient error, retrying", "op", what, "attempt", e.Attempt, "wait", e.Wait, "err", scrub(e.Err))
	}))
}

// attemptContext bounds one try by AttemptTimeout.
func (p RetryPolicy) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.AttemptTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.AttemptTimeout)
}
