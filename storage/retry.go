package storage

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how transient errors are retried: exponential backoff
// from Base, capped at Max, with full jitter, at most Attempts tries in all.
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

// Do runs op until it succeeds, fails permanently, runs out of attempts or
// ctx ends. op must be safe to repeat. The error is op's last one; when
// ctx ended the wait, it says so and also matches ctx's error.
func (p RetryPolicy) Do(ctx context.Context, what string, op func() error) error {
	attempts := max(p.Attempts, 1)
	var err error
	for i := 0; i < attempts; i++ {
		if err = op(); err == nil || !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			// A try cut short by the caller's deadline looks transient.
			return stopped(err, ctx)
		}
		if i == attempts-1 {
			break
		}
		d := p.backoff(i)
		slog.Debug("storage: transient error, retrying", "op", what, "attempt", i+1, "wait", d, "err", scrub(err))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return stopped(err, ctx)
		case <-t.C:
		}
	}
	return err
}

func stopped(err error, ctx context.Context) error {
	return fmt.Errorf("%w (retries stopped: %w)", err, context.Cause(ctx))
}

// backoff is the wait before retry number attempt+1 (attempt counts from
// 0): a random duration up to Base·2^attempt, capped at Max. Base <= 0
// means no wait.
func (p RetryPolicy) backoff(attempt int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	shift := min(max(attempt, 0), 62)
	d := p.Base << shift
	if d>>shift != p.Base || d <= 0 { // overflow
		d = time.Hour
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	// Full jitter spreads out writers that failed together.
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// attemptContext bounds one try by AttemptTimeout.
func (p RetryPolicy) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.AttemptTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.AttemptTimeout)
}
