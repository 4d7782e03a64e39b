package demo

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// pretrainedPath is the committed starting checkpoint (see README.md).
const pretrainedPath = "testdata/pretrained.wlm"

// chatter serves a local model to the episode loop in process, as whale's
// loopback server would over HTTP.
type chatter struct{ m *local.Model }

func (c chatter) Chat(ctx context.Context, req models.Request) (*models.Response, error) {
	o := local.SampleOptions{MaxNewTokens: 48, Temperature: 1, TopK: 20}
	if s := req.Sampling; s.MaxTokens != nil {
		o.MaxNewTokens = int(*s.MaxTokens)
	}
	if s := req.Sampling; s.Temperature != nil {
		o.Temperature = *s.Temperature
	}
	if s := req.Sampling; s.TopK != nil {
		o.TopK = *s.TopK
	}
	if req.Seed != nil {
		o.Seed = uint64(*req.Seed)
	}
	gens, err := c.m.GenerateChat(ctx, [][]schemas.Message{req.Messages}, o)
	if err != nil {
		return nil, err
	}
	g := gens[0]
	return &models.Response{Content: g.Text, FinishReason: g.FinishReason, Model: "demo-local",
		PromptTokens: int64(g.PromptTokens), CompletionTokens: int64(g.CompletionTokens)}, nil
}

// paperSampling is the paper's decoding: temperature 1, top-k 20.
var paperSampling = models.Sampling{Temperature: models.Ptr(1.0), TopK: models.Ptr(20)}

// variant is h0 with one constant's assignment replaced, as the mutate
// proposer would write it.
func variant(t *testing.T, name, value string) *harness.Harness {
	t.Helper()
	src := string(baseline)
	if name != "" {
		old := "\n" + name + " = "
		i := strings.Index(src, old)
		if i < 0 {
			t.Fatalf("h0 has no assignment of %s", name)
		}
		end := strings.IndexByte(src[i+1:], '\n') + i + 1
		src = src[:i] + old + value + src[end:]
	}
	h, err := harness.Load("h0.star", []byte(src), harness.Options{Contract: Contract()})
	if err != nil {
		t.Fatalf("load h0 with %s = %s: %v", name, value, err)
	}
	return h
}

// rollouts plays k episodes of every task, two at a time per core, and
// returns the results in task-major order.
func rollouts(ctx context.Context, t *testing.T, m *local.Model, h *harness.Harness, tasks []schemas.Task, k int, seed int64) []episode.Result {
	t.Helper()
	dom := NewDomain()
	out := make([]episode.Result, len(tasks)*k)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) * 2 {
		wg.Go(func() {
			for i := range next {
				out[i] = episode.Run(ctx, dom, h, chatter{m}, tasks[i/k], episode.Config{Sampling: paperSampling, Seed: seed + int64(i)*16})
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

func loadPretrained(t *testing.T) *local.Model {
	t.Helper()
	m, err := local.Load(pretrainedPath)
	if err != nil {
		t.Fatalf("load the committed checkpoint (rebuild it with the command in README.md): %v", err)
	}
	return m
}

// testSamples is k of mean@k on the 54 test tasks: 162 episodes per
// number, whose standard error (≤ 0.04) is well inside the margins.
const testSamples = 3

// TestHarnessLever: with the pretrained weights, flipping one constant of
// h0 (each edit the mutate proposer can make) must beat h0 by 10 points
// of mean@k on the held-out test split. Integration test: ~20 s.
func TestHarnessLever(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (about 20 s of sampling): run without -short")
	}
	ctx := context.Background()
	m := loadPretrained(t)
	test, err := Tasks(11, SplitSize(SplitTest), SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	base := meanReward(rollouts(ctx, t, m, variant(t, "", ""), test, testSamples, 1))
	best, bestName := base, "h0"
	for _, c := range []struct{ name, value string }{
		{"ANSWER_CUE", "True"},
		{"LENIENT_PARSE", "True"},
		{"FORMAT_RETRIES", "1"},
		{"MAX_TURNS", "1"}, // no effect with no retries: a control
	} {
		acc := meanReward(rollouts(ctx, t, m, variant(t, c.name, c.value), test, testSamples, 1))
		t.Logf("%s = %s: mean@%d %.3f (h0 %.3f) on %d test tasks", c.name, c.value, testSamples, acc, base, len(test))
		if acc > best {
			best, bestName = acc, c.name+" = "+c.value
		}
	}
	if best-base < 0.10 {
		t.Errorf("best single-constant harness %s: mean@%d %.3f, h0 %.3f: gain %.3f, want ≥ 0.10", bestName, testSamples, best, base, best-base)
	}
}

// rsftStep is one online RSFT step as the paper runs it: G samples per
// prompt under h, keep those with reward > 0.5, one SFT step over all of
// them with the loss on the model's own tokens only.
func rsftStep(ctx context.Context, t *testing.T, m *local.Model, h *harness.Harness, prompts []schemas.Task, g int, seed int64, lr float64) (accepted int, trainReward float64) {
	t.Helper()
	rs := rollouts(ctx, t, m, h, prompts, g, seed)
	var batch []local.Example
	for _, r := range rs {
		if r.Reward <= 0.5 {
			continue
		}
		toks, mask, err := local.Encode(r.Messages, false)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, local.Example{Tokens: toks, Mask: mask})
	}
	if len(batch) > 0 {
		if _, err := m.TrainStep(ctx, batch, local.TrainOptions{LR: lr, ClipNorm: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return len(batch), meanReward(rs)
}

// TestWeightLever: a few RSFT steps on train tasks under h0 must raise
// h0's mean@k on the held-out test split by a clear margin. Integration
// test: ~30 s.
func TestWeightLever(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (about 30 s of sampling and training): run without -short")
	}
	ctx := context.Background()
	m := loadPretrained(t)
	h0 := variant(t, "", "")
	test, err := Tasks(11, SplitSize(SplitTest), SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	train, err := Tasks(12, SplitSize(SplitTrain), SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	before := meanReward(rollouts(ctx, t, m, h0, test, testSamples, 1))
	const steps, perStep, g = 6, 48, 4
	for s := range steps {
		start := time.Now()
		prompts := make([]schemas.Task, perStep)
		for i := range prompts {
			prompts[i] = train[(s*perStep+i)%len(train)]
		}
		n, r := rsftStep(ctx, t, m, h0, prompts, g, int64(1000+s*10000), 1e-3)
		t.Logf("RSFT step %d: %d prompts × %d, train reward %.3f, %d accepted (%v)", s+1, len(prompts), g, r, n, time.Since(start).Round(time.Millisecond))
	}
	after := meanReward(rollouts(ctx, t, m, h0, test, testSamples, 1))
	t.Logf("h0 mean@%d on %d test tasks: %.3f before RSFT, %.3f after %d steps", testSamples, len(test), before, after, steps)
	if after-before < 0.10 {
		t.Errorf("RSFT raised h0's test mean@%d from %.3f to %.3f, want a gain ≥ 0.10", testSamples, before, after)
	}
}
