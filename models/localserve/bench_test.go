package localserve

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// BenchmarkServeDemo32: 32 concurrent chat requests through HTTP and the
// real client against the demo model; reports completion tokens per second
// and Generate calls per round.
func BenchmarkServeDemo32(b *testing.B) {
	for _, maxTok := range []int64{64, 128} {
		b.Run(fmt.Sprintf("max_tokens=%d", maxTok), func(b *testing.B) {
			m, err := local.New(local.DemoConfig(), 1)
			if err != nil {
				b.Fatal(err)
			}
			f := start(b, m, Options{})
			const n = 32
			var tokens int64
			var mu sync.Mutex
			calls0 := f.srv.calls.Load()
			start := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						r, err := f.client.Chat(context.Background(), models.Request{
							Messages: []schemas.Message{{Role: "system", Content: "Answer with a number."}, {Role: "user", Content: fmt.Sprintf("What is %d + %d?", i, i+7)}},
							Sampling: models.Sampling{Temperature: models.Ptr(1.0), MaxTokens: models.Ptr(maxTok), Seed: models.Ptr(int64(i))}})
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						tokens += r.CompletionTokens
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(tokens)/secs, "tokens/s")
			b.ReportMetric(float64(f.srv.calls.Load()-calls0)/float64(b.N), "generate_calls/round")
		})
	}
}
