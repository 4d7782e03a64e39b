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

// BenchmarkServeEpisodes plays 64 two-turn conversations at once through
// HTTP against the search demo's model shape (random weights): a system
// prompt and a question, the reply, then a tool result of ~150 bytes and a
// second reply, as an episode of the search demo does. With the prefix
// cache the second call is fed only its new tokens (and every call finds
// the system prompt); "off" feeds everything. Reports episodes/s and the
// share of prompt rows the cache gave.
func BenchmarkServeEpisodes(b *testing.B) {
	cfg := local.DemoConfig()
	cfg.Context = 512
	const n = 64
	system := "You answer questions about people. Call search with a name to read what is known about them, then answer inside <answer></answer>."
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"cache", 0}, {"off", -1}} {
		b.Run(c.name, func(b *testing.B) {
			m, err := local.New(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			f := start(b, m, Options{PrefixCacheBytes: c.bytes})
			sampling := models.Sampling{Temperature: models.Ptr(1.0), MaxTokens: models.Ptr(int64(48))}
			episodes := 0
			start := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for j := range n {
					i := episodes + j // new questions every round: only the system prompt repeats
					wg.Go(func() {
						msgs := []schemas.Message{{Role: "system", Content: system}, {Role: "user", Content: fmt.Sprintf("Where is the home of person %d?", i)}}
						r, err := f.client.Chat(context.Background(), models.Request{Messages: msgs, Sampling: sampling, Seed: models.Ptr(int64(i))})
						if err != nil {
							b.Error(err)
							return
						}
						msgs = append(msgs, r.Message(), schemas.Message{Role: "user", Content: fmt.Sprintf("Person %d lives in a town by the sea. Person %d keeps a cat. Person %d wears green. Person %d was born in the north.", i, i, i, i)})
						if _, err := f.client.Chat(context.Background(), models.Request{Messages: msgs, Sampling: sampling, Seed: models.Ptr(int64(n + i))}); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				episodes += n
			}
			b.ReportMetric(float64(episodes)/time.Since(start).Seconds(), "episodes/s")
			if st := f.srv.PrefixStats(); st.Lookups > 0 {
				b.ReportMetric(float64(st.ReusedRows)/float64(st.ReusedRows+st.FedRows), "cached_share")
			}
		})
	}
}
