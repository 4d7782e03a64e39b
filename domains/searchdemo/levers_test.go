package searchdemo

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/localserve"
	"github.com/whalerun/whale/schemas"
)

// pretrainedPath is the committed starting checkpoint (see README.md);
// SEARCHDEMO_CHECKPOINT measures another.
func pretrainedPath() string {
	if p := os.Getenv("SEARCHDEMO_CHECKPOINT"); p != "" {
		return p
	}
	return "testdata/pretrained.wlm"
}

// bench is the demo's world served the way a run serves it: the corpus in
// a BM25 index built by searchqa.BuildIndex, the model behind whale's own
// OpenAI-compatible server on loopback, episodes through episode.Run with
// the search-QA domain.
type bench struct {
	m      *local.Model
	srv    *localserve.Server
	client *models.Client
	dom    episode.Domain
}

// newBench serves the starting checkpoint with a prefix cache of
// prefixCache bytes (0: the server's default, negative: none).
func newBench(t *testing.T, prefixCache int64) *bench {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir() + "/index"
	docs := NewWorld().Corpus()
	corpus := searchqa.CorpusFunc(func(_ context.Context, fn func(searchqa.Doc) error) error {
		for _, d := range docs {
			if err := fn(d); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := searchqa.BuildIndex(ctx, dir, corpus, searchqa.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	idx, err := searchqa.OpenIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	m, err := local.Load(pretrainedPath())
	if err != nil {
		t.Fatalf("load the starting checkpoint (rebuild it with the command in README.md): %v", err)
	}
	srv, err := localserve.New(m, localserve.Options{Name: "searchdemo-local", PrefixCacheBytes: prefixCache, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	c, err := models.New(models.Config{Endpoints: []string{ts.URL + "/v1"}, Model: "searchdemo-local", Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	return &bench{m: m, srv: srv, client: c, dom: searchqa.NewDomain(idx)}
}

// variant is h0-local with constants' assignments replaced ("TOPK", "3"),
// as the mutate proposer would write them.
func variant(t *testing.T, edits ...string) *harness.Harness {
	t.Helper()
	src := string(searchqa.Harnesses()[StartHarness])
	for i := 0; i+1 < len(edits); i += 2 {
		old := "\n" + edits[i] + " = "
		at := strings.Index(src, old)
		if at < 0 {
			t.Fatalf("h0-local has no assignment of %s", edits[i])
		}
		end := strings.IndexByte(src[at+1:], '\n') + at + 1
		src = src[:at] + old + edits[i+1] + src[end:]
	}
	h, err := harness.Load(StartHarness+".star", []byte(src), harness.Options{Contract: searchqa.Contract()})
	if err != nil {
		t.Fatalf("load h0-local with %v: %v", edits, err)
	}
	return h
}

// paperSampling is the paper's decoding: temperature 1, top-k 20.
var paperSampling = models.Sampling{Temperature: models.Ptr(1.0), TopK: models.Ptr(20)}

// rollouts plays k episodes of every task, 64 at a time, in task-major
// order.
func (b *bench) rollouts(t *testing.T, h *harness.Harness, tasks []schemas.Task, k int, seed int64) []episode.Result {
	t.Helper()
	ctx := context.Background()
	out := make([]episode.Result, len(tasks)*k)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				out[i] = episode.Run(ctx, b.dom, h, b.client, tasks[i/k], episode.Config{Sampling: paperSampling, Seed: seed + int64(i)*16})
			}
		})
	}
	for i := range out {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, r := range out {
		if r.FinishReason == episode.FinishError {
			t.Fatalf("episode failed: %s", r.Error)
		}
	}
	return out
}

func meanReward(rs []episode.Result) float64 {
	var s float64
	for _, r := range rs {
		s += r.Reward
	}
	return s / float64(len(rs))
}

// rsftStep is one online RSFT step as the pipeline runs it: G samples per
// prompt under h, keep those with reward > 0.5, one SFT step over them
// with the loss on the model's own tokens, rendered with the tools turn.
func (b *bench) rsftStep(t *testing.T, h *harness.Harness, prompts []schemas.Task, g int, seed int64, lr float64) (accepted int, trainReward float64) {
	t.Helper()
	rs := b.rollouts(t, h, prompts, g, seed)
	var batch []local.Example
	for _, r := range rs {
		if r.Reward <= 0.5 {
			continue
		}
		tools, err := local.ToolsFromJSON(r.Tools)
		if err != nil {
			t.Fatal(err)
		}
		toks, mask, err := local.EncodeTools(r.Messages, tools, false)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, local.Example{Tokens: toks, Mask: mask})
	}
	if len(batch) > 0 {
		// The server only reads the weights between batches of requests;
		// no request is in flight here.
		if _, err := b.m.TrainStep(context.Background(), batch, local.TrainOptions{LR: lr, ClipNorm: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return len(batch), meanReward(rs)
}

// rsft runs steps RSFT steps of perStep train prompts × g under h.
func (b *bench) rsft(t *testing.T, h *harness.Harness, steps, perStep, g int, lr float64) {
	t.Helper()
	train, err := NewWorld().Tasks(SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	for s := range steps {
		prompts := make([]schemas.Task, perStep)
		for i := range prompts {
			prompts[i] = train[(s*perStep*7+i*7)%len(train)]
		}
		n, r := b.rsftStep(t, h, prompts, g, int64(1000+s*10000), lr)
		t.Logf("RSFT step %d: %d prompts × %d, train reward %.3f, %d accepted", s+1, len(prompts), g, r, n)
	}
}

func testTasks(t *testing.T) []schemas.Task {
	t.Helper()
	test, err := NewWorld().Tasks(SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	return test
}

// testSamples is k of mean@k on the 60 test tasks: 180 episodes per
// number, whose standard error (≤ 0.037) is well inside the margins.
const testSamples = 3

// The RSFT the lever tests run: steps of perStep train prompts × G, at
// the demo's learning rate.
const (
	leverSteps   = 8
	leverPerStep = 48
	leverG       = 4
	leverLR      = 5e-4
)

// TestLevers measures both levers on the held-out test split and checks
// that neither absorbs the other. Alone each moves little: the pretrained
// model copies too unreliably to use the passages TOPK = 3 (an edit the
// mutate proposer makes) adds, and RSFT under h0 cannot teach facts h0
// does not show. Together they do: RSFT under TOPK = 3 must end 10 points
// above either single lever, and the weights trained under h0 must still
// gain 8 points from TOPK = 3. README.md has the numbers. Integration
// test: about a minute and a half on 2 cores.
func TestLevers(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (about a minute of sampling and training): run without -short")
	}
	test := testTasks(t)
	h0, top3 := variant(t), variant(t, "TOPK", "3")
	score := func(b *bench, h *harness.Harness) float64 {
		return meanReward(b.rollouts(t, h, test, testSamples, 1))
	}
	b := newBench(t, 0)
	base, harnessOnly := score(b, h0), score(b, top3)
	b.rsft(t, h0, leverSteps, leverPerStep, leverG, leverLR)
	weightsOnly, harnessAfter := score(b, h0), score(b, top3)
	b2 := newBench(t, 0)
	b2.rsft(t, top3, leverSteps, leverPerStep, leverG, leverLR)
	both := score(b2, top3)
	t.Logf("test mean@%d over %d tasks: h0 %.3f, TOPK=3 %.3f; after %d RSFT steps under h0: h0 %.3f, TOPK=3 %.3f; after %d steps under TOPK=3: TOPK=3 %.3f",
		testSamples, len(test), base, harnessOnly, leverSteps, weightsOnly, harnessAfter, leverSteps, both)
	if harnessAfter-weightsOnly < 0.08 {
		t.Errorf("the weights absorbed the harness lever: after RSFT under h0, TOPK=3 %.3f against h0 %.3f, want a gain ≥ 0.08", harnessAfter, weightsOnly)
	}
	if both-max(harnessOnly, weightsOnly) < 0.10 {
		t.Errorf("both levers %.3f, not above harness alone %.3f and weights alone %.3f by 0.10", both, harnessOnly, weightsOnly)
	}
}
