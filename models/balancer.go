package models

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// endpoint is one base URL with its own slot semaphore and health.
type endpoint struct {
	url    string      // redacted, for errors and logs
	chat   *url.URL    // the chat completions URL; never modified
	header http.Header // sent with every request; never modified
	sem    chan struct{}
	// The fields below are guarded by balancer.mu.
	assigned  int       // calls that picked this endpoint and have not released it (queued or running)
	failures  int       // consecutive transient failures
	coolUntil time.Time // failure cool-down: skipped while another endpoint is usable
	retryAt   time.Time // the server's Retry-After: not used before then
}

// balancer assigns calls to endpoints: the fewest assigned calls wins, ties
// go round-robin, cooling endpoints are skipped while another is usable.
type balancer struct {
	mu     sync.Mutex
	eps    []*endpoint
	next   int // round-robin start for ties
	cool   CooldownPolicy
	logger *slog.Logger
	now    func() time.Time
}

// acquire picks an endpoint, preferring one other than avoid, and waits for
// a free slot on it. The caller must release it.
func (b *balancer) acquire(ctx context.Context, avoid *endpoint) (*endpoint, error) {
	for {
		ep, wait := b.pick(avoid)
		if ep == nil {
			// Every endpoint asked us to wait (Retry-After): wait for the
			// first to allow calls again.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, context.Cause(ctx)
			case <-t.C:
			}
			continue
		}
		select {
		case ep.sem <- struct{}{}:
			return ep, nil
		case <-ctx.Done():
			b.mu.Lock()
			ep.assigned--
			b.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
}

// pick assigns an endpoint, or returns how long until one may be called.
// Preference, from first to last: healthy and not the one that just failed
// this call; healthy; cooling down after failures (when all are, the backoff
// between attempts is the only wait, so one flaky endpoint still gets its
// retries). Endpoints under a Retry-After are never picked.
func (b *balancer) pick(avoid *endpoint) (*endpoint, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	n := len(b.eps)
	var best *endpoint
	bestTier := 3
	var soonest time.Time
	for i := range n {
		ep := b.eps[(b.next+i)%n]
		if ep.retryAt.After(now) {
			if soonest.IsZero() || ep.retryAt.Before(soonest) {
				soonest = ep.retryAt
			}
			continue
		}
		tier := 0
		switch {
		case ep.coolUntil.After(now):
			tier = 2
		case ep == avoid:
			tier = 1
		}
		if tier < bestTier || (tier == bestTier && ep.assigned < best.assigned) {
			best, bestTier = ep, tier
		}
	}
	if best == nil {
		return nil, max(soonest.Sub(now), time.Millisecond)
	}
	b.next = (b.next + 1) % n
	best.assigned++
	return best, 0
}

func (b *balancer) release(ep *endpoint) {
	<-ep.sem
	b.mu.Lock()
	ep.assigned--
	b.mu.Unlock()
}

// succeeded ends the endpoint's cool-down and resets its failure count.
func (b *balancer) succeeded(ep *endpoint) {
	b.mu.Lock()
	ep.failures = 0
	ep.coolUntil = time.Time{}
	b.mu.Unlock()
}

// failed records a transient failure of ep. retryAfter, when the server sent
// one, bars the endpoint for that long; Failures consecutive failures cool it
// down for the policy's Duration, and an endpoint back from its cool-down
// that fails again cools down again at once.
func (b *balancer) failed(ep *endpoint, kind Kind, retryAfter time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	ep.failures++
	if retryAfter > 0 {
		ep.retryAt = later(ep.retryAt, now.Add(retryAfter))
	}
	if ep.failures >= b.cool.Failures {
		if !ep.coolUntil.After(now) {
			b.logger.Warn("models: endpoint cooling down", "endpoint", ep.url, "kind", string(kind),
				"consecutive_failures", ep.failures, "for", b.cool.Duration)
		}
		ep.coolUntil = later(ep.coolUntil, now.Add(b.cool.Duration))
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
