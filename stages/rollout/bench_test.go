package rollout

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/stagetest"
)

// BenchmarkRolloutStage measures episodes per second through the whole
// stage (tasks read, harness hooks, model calls, Parquet rows, upload,
// commit) on mem://, 4096 one-call episodes per run. "http" runs against
// a zero-latency fake server through the real models.Client and, in the
// same process and alternating with the stage, a bare HTTP loop (see
// modeltest.Bare) sending the same request body as many times: ratio is
// the stage's episodes/s over the bare loop's calls/s, what the pipeline
// sustains of what the endpoint could serve. "inprocess" has a fake
// in-process model, which leaves the stage's own cost.
func BenchmarkRolloutStage(b *testing.B) {
	const n, g = 512, 8
	for _, inprocess := range []bool{false, true} {
		name := "http"
		if inprocess {
			name = "inprocess"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s := openStore(b, "mem://")
			stagetest.ImportTasks(b, s, "train", tasks(n), n)
			var (
				srv *modeltest.Server
				m   episode.Chatter = stagetest.FakeChatter{Model: model}
			)
			if !inprocess {
				srv = modeltest.NewServer(b, modeltest.Always(modeltest.Reply{Content: "<answer>a1</answer>"}))
				m = stagetest.Client(b, srv, model, 64)
			}
			st := &Stage{Domain: stagetest.FakeDomain{}, Model: m, Concurrency: 16, Log: quiet}
			cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: g}
			i := 0
			run := func() time.Duration {
				i++
				start := time.Now()
				res, err := stages.Execute(ctx, s, spec(fmt.Sprintf("r%03d-w01", i), cfg, 1, 1, 0), st)
				if err != nil || !res.Committed {
					b.Fatal(res, err)
				}
				return time.Since(start)
			}
			var bare *modeltest.Bare
			var body [][]byte
			if !inprocess {
				run() // warm up; its first request is the bare loop's body
				body = [][]byte{srv.Requests()[0].Raw}
				srv.Record(false)
				bare = modeltest.NewBare(srv, 16)
			}
			var stageTime, bareTime time.Duration
			runBare := func() {
				if bare != nil {
					d, err := bare.Run(ctx, body, n*g)
					if err != nil {
						b.Fatal(err)
					}
					bareTime += d
				}
			}
			measured := 0
			for ; b.Loop(); measured++ {
				// Alternate which goes first, so that load from elsewhere
				// on the machine hits both alike.
				if measured%2 == 1 {
					runBare()
				}
				stageTime += run()
				if measured%2 == 0 {
					runBare()
				}
			}
			rate := float64(measured*n*g) / stageTime.Seconds()
			if !inprocess {
				bareRate := float64(measured*n*g) / bareTime.Seconds()
				b.ReportMetric(bareRate, "bare_calls/s")
				b.ReportMetric(rate/bareRate, "ratio")
			}
			b.ReportMetric(rate, "episodes/s")
		})
	}
}

// TestRolloutMemoryFlat plays 100k episodes (a fake in-process model and
// the fake domain) and reports the peak heap in use and the process's
// peak RSS. Memory must not grow with episodes: the peak of 100k episodes
// stays within a small margin of the peak of 12.5k.
func TestRolloutMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("plays 125k episodes (≈2 s on 2 cores); run without -short")
	}
	ctx := context.Background()
	s := openStore(t, "mem://")
	const g = 8
	stagetest.ImportTasks(t, s, "train", tasks(100_000/g), 4096)
	st := &Stage{Domain: stagetest.FakeDomain{}, Model: stagetest.FakeChatter{Model: model}, Concurrency: 8, Log: quiet}
	peak := func(pos string, limit int) (heap uint64, elapsed time.Duration) {
		runtime.GC()
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			var ms runtime.MemStats
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				runtime.ReadMemStats(&ms)
				mu.Lock()
				heap = max(heap, ms.HeapInuse)
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		})
		start := time.Now()
		cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: g, Limit: limit}
		res, err := stages.Execute(ctx, s, spec(pos, cfg, 1, 1, 0), st)
		elapsed = time.Since(start)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Manifest.Rows("rollouts"); got != int64(limit*g) {
			t.Fatalf("%d rows, want %d", got, limit*g)
		}
		return heap, elapsed
	}
	small, ts := peak("r001-w01", 12_500/g)
	big, tb := peak("r001-w02", 100_000/g)
	t.Logf("peak HeapInuse: 12.5k episodes %.1f MiB (%v), 100k episodes %.1f MiB (%v, %.0f episodes/s); VmHWM %s",
		mib(small), ts.Round(time.Millisecond), mib(big), tb.Round(time.Millisecond), 100_000/tb.Seconds(), vmHWM())
	if big > small+small/2+32<<20 {
		t.Fatalf("peak heap grew from %.1f MiB (12.5k episodes) to %.1f MiB (100k)", mib(small), mib(big))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// vmHWM is the process's peak resident set, from /proc (Linux only).
func vmHWM() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
