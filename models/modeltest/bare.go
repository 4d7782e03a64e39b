package modeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bare is the reference that benchmarks hold whale's rollout path against:
// a plain net/http loop that POSTs ready-made chat completion bodies to a
// server and decodes only the reply's model, content and finish reason.
// Its connections stay pooled between runs.
type Bare struct {
	url         string
	hc          *http.Client
	concurrency int
}

// NewBare makes a bare loop to s that keeps concurrency calls in flight.
func NewBare(s *Server, concurrency int) *Bare {
	return &Bare{
		url:         s.URL + "/chat/completions",
		hc:          &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency + 4}},
		concurrency: concurrency,
	}
}

// Run makes n calls, the i-th sending bodies[i%len(bodies)], and returns
// how long they took. It stops at the first failed call.
func (b *Bare) Run(ctx context.Context, bodies [][]byte, n int) (time.Duration, error) {
	return Parallel(n, b.concurrency, func(i int64) error { return b.call(ctx, bodies[i%int64(len(bodies))]) })
}

// Parallel calls f(0) to f(n-1) from c goroutines and returns how long
// they took: the loop benchmarks drive the bare loop and whale's client
// with alike. It stops at the first error and returns it.
func Parallel(n, c int, f func(i int64) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

func (b *Bare) call(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return fmt.Errorf("bare call: %w", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		return fmt.Errorf("bare call: status %d, %d choices", res.StatusCode, len(out.Choices))
	}
	return nil
}
