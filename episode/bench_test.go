package episode

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

const benchConcurrency = 16

// BenchmarkRunEpisode measures episodes/s and model calls/s through Run
// and RunBatch at concurrency 16 against a zero-latency modeltest server,
// and, in the same run and against the same server at the same
// concurrency, two references: a bare net/http loop that POSTs the very
// bodies the loop sent (one episode's worth, in turn), and models.Client
// alone sending the same messages. ratio is the loop's calls/s over the
// bare loop's: what the episode loop and the client cost on top of the
// HTTP round trip; client_ratio is the loop's over the client's: what
// this package (hooks, state, trace) adds. The cpu_ figures are calls per
// CPU-second of the whole process (server included), steadier than wall
// time on a shared machine. b.N counts episodes.
//
// The server stops recording requests after the first episode, so the
// heap stays flat and every side pays the same garbage collection per
// call.
func BenchmarkRunEpisode(b *testing.B) {
	answer := modeltest.Reply{Content: "Six times seven is <answer>42</answer>.", PromptTokens: 60, CompletionTokens: 12}
	// byTurn searches twice, then answers: a three-call episode.
	byTurn := func(req *modeltest.Request) modeltest.Reply {
		n := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		if n < 2 {
			return modeltest.Reply{Content: fmt.Sprintf("Let me look it up. <search>whale song %d</search>", n), PromptTokens: 80, CompletionTokens: 10}
		}
		return answer
	}
	cases := []struct {
		name    string
		src     string
		handler modeltest.Handler
		calls   int
	}{
		{"default_harness/1_call", "", modeltest.Always(answer), 1},
		{"starlark_harness/3_calls", taggedSrc + "MAX_TURNS = 4\n", byTurn, 3},
		// taggedSrc's parse_action never reads its state, so the runtime
		// does not convert it; this one does, and pays for a copy of the
		// whole state on every call.
		{"starlark_reads_state/3_calls", stateReadingSrc + "MAX_TURNS = 4\n", byTurn, 3},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) { benchRunEpisode(b, bc.src, bc.handler, bc.calls) })
	}
}

// stateReadingSrc is taggedSrc with a parse_action that reads its state.
var stateReadingSrc = strings.Replace(taggedSrc, "def parse_action(text, state):\n",
	"def parse_action(text, state):\n    if len(state[\"messages\"]) > 4 * MAX_TURNS:\n        return {\"kind\": \"invalid\", \"error\": \"too long\"}\n", 1)

func benchRunEpisode(b *testing.B, src string, handler modeltest.Handler, calls int) {
	srv := modeltest.NewServer(b, handler)
	client, err := models.New(models.Config{
		Endpoints:   []string{srv.URL},
		Model:       "bench-model",
		Concurrency: benchConcurrency,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	h := loadHarness(b, src)
	dom := &fakeDomain{contract: fakeContract()}
	tk := task("bench-1", "What is six times seven?", "42")
	play := func(ctx context.Context, j Job) Result {
		return Run(ctx, dom, h, client, tk, Config{Seed: j.Seed})
	}
	var bad atomic.Int64
	emit := func(j Job, r Result) error {
		if r.FinishReason != FinishAnswer || r.Turns != calls {
			if bad.Add(1) == 1 {
				return fmt.Errorf("job %d: finish %s after %d turns: %s", j.Index, r.FinishReason, r.Turns, r.Error)
			}
		}
		return nil
	}
	runLoop := func(n int) time.Duration {
		start := time.Now()
		if err := RunBatch(context.Background(), benchConcurrency, seqJobs(n), play, emit); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}

	// One episode first: its request bodies are what the bare loop sends.
	runLoop(1)
	reqs := srv.Requests()
	if len(reqs) != calls {
		b.Fatalf("one episode made %d calls, want %d", len(reqs), calls)
	}
	// Recording every body would grow the heap through the run, and the
	// garbage collector's pace would then decide the ratio.
	srv.Record(false)
	bodies := make([][]byte, calls)
	for i, r := range reqs {
		bodies[i] = r.Raw
	}
	bare := modeltest.NewBare(srv, benchConcurrency)
	runBare := func(n int) time.Duration {
		d, err := bare.Run(context.Background(), bodies, n)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	maxTokens := int64(h.Int("MAX_TOKENS"))
	viaClient := func(i int64) error {
		seed := i
		res, err := client.Chat(context.Background(), models.Request{Messages: reqs[i%int64(calls)].Messages,
			Sampling: models.Sampling{MaxTokens: &maxTokens}, Seed: &seed})
		if err != nil {
			return err
		}
		if res.Content == "" {
			return fmt.Errorf("client: empty reply")
		}
		return nil
	}
	runClient := func(n int) time.Duration {
		d, err := modeltest.Parallel(n, benchConcurrency, viaClient)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	// Warm the connection pools.
	runLoop(2 * benchConcurrency)
	runBare(2 * benchConcurrency * calls)
	runClient(2 * benchConcurrency * calls)
	b.ResetTimer()

	// Short rounds in alternating order, so that load from elsewhere on
	// the machine hits both sides alike.
	const rounds = 10
	var loop, bareSide, clientSide side
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		if n == 0 {
			continue
		}
		sides := []func(){
			func() { loop.measure(n*calls, func() time.Duration { return runLoop(n) }) },
			func() { bareSide.measure(n*calls, func() time.Duration { return runBare(n * calls) }) },
			func() { clientSide.measure(n*calls, func() time.Duration { return runClient(n * calls) }) },
		}
		// Rotate the order, so that no side always runs first.
		for range r % len(sides) {
			sides = append(sides[1:], sides[0])
		}
		for _, f := range sides {
			f()
		}
	}
	b.StopTimer()
	if bad.Load() > 0 {
		b.Fatalf("%d episodes did not end as expected", bad.Load())
	}
	b.ReportMetric(loop.rate()/float64(calls), "episodes/s")
	b.ReportMetric(loop.rate(), "loop_calls/s")
	b.ReportMetric(clientSide.rate(), "client_calls/s")
	b.ReportMetric(bareSide.rate(), "bare_calls/s")
	b.ReportMetric(loop.rate()/bareSide.rate(), "ratio")
	b.ReportMetric(loop.rate()/clientSide.rate(), "client_ratio")
	b.ReportMetric(loop.cpuRate(), "loop_calls/cpu_s")
	b.ReportMetric(bareSide.cpuRate(), "bare_calls/cpu_s")
	b.ReportMetric(loop.cpuRate()/bareSide.cpuRate(), "cpu_ratio")
	b.ReportMetric(loop.cpuRate()/clientSide.cpuRate(), "client_cpu_ratio")
}

// side accumulates one contender's calls, wall time and process CPU time.
type side struct {
	calls     int
	wall, cpu time.Duration
}

func (s *side) measure(calls int, run func() time.Duration) {
	c0 := cpuTime()
	s.wall += run()
	s.cpu += cpuTime() - c0
	s.calls += calls
}

func (s *side) rate() float64    { return float64(s.calls) / s.wall.Seconds() }
func (s *side) cpuRate() float64 { return float64(s.calls) / s.cpu.Seconds() }

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cannedChatter answers every call at once, without HTTP: what remains is
// the loop's own cost (hooks, state, trace). Before the last reply it sends
// searches replies, one per call, as the HTTP benchmark's byTurn does.
type cannedChatter struct {
	resp     models.Response
	searches int
}

func (c *cannedChatter) Chat(ctx context.Context, req models.Request) (*models.Response, error) {
	r := c.resp
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	if n < c.searches {
		r.Content = fmt.Sprintf("Let me look it up. <search>whale song %d</search>", n)
	}
	return &r, nil
}

// BenchmarkRunNoHTTP is Run alone against an in-process Chatter, one
// caller, for profiling the loop itself; the cases mirror
// BenchmarkRunEpisode's.
func BenchmarkRunNoHTTP(b *testing.B) {
	cases := []struct {
		name     string
		src      string
		searches int
	}{
		{"default_harness/1_call", "", 0},
		{"starlark_harness/1_call", taggedSrc, 0},
		{"starlark_harness/3_calls", taggedSrc + "MAX_TURNS = 4\n", 2},
		{"starlark_reads_state/3_calls", stateReadingSrc + "MAX_TURNS = 4\n", 2},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			h := loadHarness(b, bc.src)
			dom := &fakeDomain{contract: fakeContract()}
			tk := task("bench-1", "What is six times seven?", "42")
			m := &cannedChatter{searches: bc.searches, resp: models.Response{Content: "Six times seven is <answer>42</answer>.", FinishReason: "stop", Model: "m", PromptTokens: 60, CompletionTokens: 12, Attempts: 1, Endpoint: "http://127.0.0.1:1/v1"}}
			b.ReportAllocs()
			for i := range b.N {
				r := Run(context.Background(), dom, h, m, tk, Config{Seed: int64(i)})
				if r.FinishReason != FinishAnswer || r.Turns != bc.searches+1 {
					b.Fatalf("finish %s after %d turns: %s", r.FinishReason, r.Turns, r.Error)
				}
			}
		})
	}
}
