package rollout

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/stagetest"
	"github.com/whalerun/whale/storage"
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

// BenchmarkEndpointUtilisation measures how much of its endpoints' capacity
// the whole rollout stage uses (tasks read, harness, model calls through
// the real models.Client, Parquet rows, commit, on mem://). Each of 4 fake
// servers has 64 slots (modeltest's SetSlots, as vLLM's max_num_seqs=64)
// and runs a call for 50 ms or 200 ms once it has a slot, a slot's calls
// back to back in model time as a GPU's batch runs them, so they serve at
// most capacity_calls/s = 4 × 64 / latency. The client has the 4
// endpoints and Concurrency 64 per endpoint ("conc=slots": a freed slot
// waits a round trip for the client's next call) or 128 ("conc=2x": a
// call is queued at the server for each slot, as vLLM queues requests
// beyond max_num_seqs); the stage keeps twice as many episodes in flight
// as the client's concurrency. "1_call" episodes answer at once, "3_calls"
// ones reply twice without an answer (two format retries of the fake
// domain's h0, whose MAX_TURNS is 3) and answer on the third call.
//
// calls/s is a run's calls over the time from the first model call's start
// to the last one's return, as the client sees them: the window in which
// the endpoints could be kept busy. It leaves out reading the tasks,
// loading the harness and the commit, which do not grow with the calls
// (stage_utilisation is over the whole stages.Execute instead). A short
// stage run first opens the client's connections, which a long-lived
// client dials once. A run is 96 latencies' worth of calls (24,576: ~5 s
// at 50 ms, ~20 s at 200 ms), so that the first wave's start and the last
// one's end, a fixed ~0.4 latency, cost under 0.5%. utilisation =
// calls/s ÷ capacity_calls/s; steady_utilisation leaves out the first and
// last fifth of the window (ramp-up and tail).
//
// Alternating with the stage, a bare HTTP loop (modeltest.Bare, as many
// calls in flight per endpoint as the client) makes as many calls to the
// same servers: bare_utilisation is what the machine and the fake servers
// allow, ratio is utilisation over it. late_ms is how late, on average, the fake servers wrote a reply
// after its slot's end (their goroutines share the 2 cores with whale);
// it delays the client, not the next call on the slot. cpu_us/call is the
// process's CPU time (stage, client and fake servers) per call during the
// stage runs. ns/op times a stage run and a bare run together;
// -benchtime 1x of all twelve takes ~5 min on 2 cores.
func BenchmarkEndpointUtilisation(b *testing.B) {
	const endpoints, slots, g, waves = 4, 64, 8, 96
	const calls = waves * endpoints * slots
	for _, latency := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond} {
		for _, c := range []struct {
			turns int
			tools bool
		}{{1, false}, {3, false}, {3, true}} {
			name := fmt.Sprintf("%v/%d_call", latency, c.turns)
			if c.turns > 1 {
				name += "s"
			}
			if c.tools {
				name += "_tools"
			}
			for _, conc := range []int{1, 2} {
				label := "/conc=slots"
				if conc > 1 {
					label = fmt.Sprintf("/conc=%dx", conc)
				}
				b.Run(name+label, func(b *testing.B) {
					benchUtilisation(b, endpoints, slots, conc*slots, latency, c.turns, c.tools, calls/c.turns/g, g)
				})
			}
		}
	}
}

// benchUtilisation plays n tasks × g samples of turns calls each per run;
// with tools, every call before the last is a native tool call (echo) that
// the loop runs and answers with a tool message.
func benchUtilisation(b *testing.B, endpoints, slots, conc int, latency time.Duration, turns int, tools bool, n, g int) {
	ctx := context.Background()
	s := openStore(b, "mem://")
	stagetest.ImportTasks(b, s, "train", tasks(n), 4096)
	handler := func(req *modeltest.Request) modeltest.Reply {
		assistants := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				assistants++
			}
		}
		rep := modeltest.Reply{Content: "let me think", PromptTokens: 10, CompletionTokens: 2}
		if tools {
			rep = modeltest.Reply{ToolCalls: []modeltest.ToolCall{{ID: fmt.Sprintf("c%d", assistants), Name: "echo", Arguments: `{"text": "hello"}`}}, PromptTokens: 10, CompletionTokens: 2}
		}
		if assistants >= turns-1 {
			rep = stagetest.Policy(req) // mode=all: the right answer
		}
		rep.Delay = latency
		return rep
	}
	srvs := make([]*modeltest.Server, endpoints)
	urls := make([]string, endpoints)
	bares := make([]*modeltest.Bare, endpoints)
	for i := range srvs {
		srvs[i] = modeltest.NewServer(b, handler)
		srvs[i].SetSlots(slots)
		srvs[i].Record(false)
		urls[i] = srvs[i].URL
		bares[i] = modeltest.NewBare(srvs[i], conc)
	}
	client, err := models.New(models.Config{Endpoints: urls, Model: model, Concurrency: conc,
		Retry: models.RetryPolicy{Attempts: 1}, Timeout: time.Minute, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	m := &spanChatter{Client: client}
	inFlight := 2 * endpoints * conc
	dom := stagetest.FakeDomain{}
	if tools {
		dom.BaselineSrc = stagetest.DefaultBaseline + "TOOLS = [\"echo\"]\n"
	}
	st := &Stage{Domain: dom, Model: m, Concurrency: inFlight, Log: quiet}
	cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: g}
	served := func() (n int) {
		for _, srv := range srvs {
			n += srv.Calls()
		}
		return n
	}
	late := func() (d time.Duration) {
		for _, srv := range srvs {
			d += srv.Late()
		}
		return d
	}
	runs := 0
	run := func(cfg Config, episodes int) time.Duration {
		runs++
		before := served()
		start := time.Now()
		res, err := stages.Execute(ctx, s, spec(fmt.Sprintf("r%03d-w01", runs), cfg, 1, 1, 0), st)
		el := time.Since(start)
		if err != nil || !res.Committed {
			b.Fatal(res, err)
		}
		checkUtilisationRun(b, res.Manifest, episodes, turns, served()-before)
		return el
	}
	// The bare loop's body is a first call of an episode: its reply
	// costs the server what the stage's calls cost it.
	body := [][]byte{[]byte(`{"model":"` + model + `","messages":[{"role":"system","content":"mode=all"},{"role":"user","content":"q1"}]}`)}
	runBare := func(calls int) time.Duration {
		var wg sync.WaitGroup
		took := make([]time.Duration, endpoints)
		for i, bare := range bares {
			wg.Go(func() {
				d, err := bare.Run(ctx, body, calls/endpoints)
				if err != nil {
					b.Error(err)
				}
				took[i] = d
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return slices.Max(took)
	}
	warm := cfg
	warm.Limit = inFlight / g
	run(warm, inFlight)
	runBare(2 * endpoints * slots)

	calls := n * g * turns
	var window, steadyWindow, stageTime, bareTime, lateness time.Duration
	var cpu float64
	measured, steadyCalls := 0, 0
	for ; b.Loop(); measured++ {
		// Alternate which goes first, so that load from elsewhere on the
		// machine hits both alike.
		if measured%2 == 1 {
			bareTime += runBare(calls)
		}
		m.reset()
		c0, l0 := cpuSeconds(), late()
		stageTime += run(cfg, n*g)
		cpu += cpuSeconds() - c0
		lateness += late() - l0
		window += m.span()
		n, w := m.steady()
		steadyCalls += n
		steadyWindow += w
		if measured%2 == 0 {
			bareTime += runBare(calls)
		}
	}
	for i, srv := range srvs {
		if srv.MaxRunning() > slots {
			b.Fatalf("endpoint %d ran %d calls at once on %d slots", i, srv.MaxRunning(), slots)
		}
	}
	total := float64(measured * calls)
	capacity := float64(endpoints*slots) / latency.Seconds()
	rate := total / window.Seconds()
	bareUtil := total / bareTime.Seconds() / capacity
	b.ReportMetric(rate, "calls/s")
	b.ReportMetric(capacity, "capacity_calls/s")
	b.ReportMetric(rate/capacity, "utilisation")
	b.ReportMetric(float64(steadyCalls)/steadyWindow.Seconds()/capacity, "steady_utilisation")
	b.ReportMetric(total/stageTime.Seconds()/capacity, "stage_utilisation")
	b.ReportMetric(bareUtil, "bare_utilisation")
	b.ReportMetric(rate/capacity/bareUtil, "ratio")
	b.ReportMetric(lateness.Seconds()*1e3/total, "late_ms")
	b.ReportMetric(cpu*1e6/total, "cpu_us/call")
}

// checkUtilisationRun fails unless every episode of a run made its calls
// and answered right.
func checkUtilisationRun(b *testing.B, m *storage.Manifest, episodes, turns, calls int) {
	b.Helper()
	if calls != episodes*turns {
		b.Fatalf("%d calls for %d episodes of %d calls", calls, episodes, turns)
	}
	sum := m.Summary
	if storage.SummaryNumber(sum, "episodes") != float64(episodes) || storage.SummaryNumber(sum, "failed") != 0 ||
		storage.SummaryNumber(sum, "correct") != float64(episodes) || storage.SummaryNumber(sum, "mean_turns") != float64(turns) {
		b.Fatalf("summary %v, want %d correct episodes of %d turns", sum, episodes, turns)
	}
}

// spanChatter is a model client that times the span from the first call's
// start to the last call's return, and keeps when each call returned.
type spanChatter struct {
	*models.Client
	mu          sync.Mutex
	first, last time.Time
	done        []time.Time
}

func (c *spanChatter) Chat(ctx context.Context, req models.Request) (*models.Response, error) {
	t0 := time.Now()
	res, err := c.Client.Chat(ctx, req)
	t1 := time.Now()
	c.mu.Lock()
	if c.first.IsZero() || t0.Before(c.first) {
		c.first = t0
	}
	c.last = later(c.last, t1)
	c.done = append(c.done, t1)
	c.mu.Unlock()
	return res, err
}

// steady is the rate of calls returned in the middle three fifths of the
// span: the run without its ramp-up (slots filling) and its tail (the
// last episodes finishing their turns while other slots idle), which the
// goal of "runs long enough that ramp-up is negligible" leaves out.
func (c *spanChatter) steady() (calls int, window time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	span := c.last.Sub(c.first)
	from, to := c.first.Add(span/5), c.last.Add(-span/5)
	for _, t := range c.done {
		if !t.Before(from) && t.Before(to) {
			calls++
		}
	}
	return calls, to.Sub(from)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (c *spanChatter) reset() {
	c.mu.Lock()
	c.first, c.last, c.done = time.Time{}, time.Time{}, c.done[:0]
	c.mu.Unlock()
}

func (c *spanChatter) span() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first)
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
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
