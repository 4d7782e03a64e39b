package local

import (
	"context"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func newTestModel(t testing.TB, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh init predicts nearly uniformly; sharpen it so sampling
	// choices depend on the logits and a wrong cache shows.
	for i := range m.p.outw {
		m.p.outw[i] *= 40
	}
	return m
}

var smallCfg = Config{Vocab: TokenizerVocab, Layers: 2, DModel: 32, Heads: 4, DFF: 64, Context: 48}

// TestKVCacheMatchesFullForward feeds a prompt in one step, then one token
// at a time, and compares each step's logits with a full forward pass
// over the whole sequence: with the weights as stored, packed for the
// kernel, and packed again after a training step changed them.
func TestKVCacheMatchesFullForward(t *testing.T) {
	m := newTestModel(t, smallCfg, 1)
	V := smallCfg.Vocab
	seqTokens := EncodeText("the quick brown fox jumps over the lazy dog")
	for _, tc := range []struct {
		name         string
		packed, step bool
	}{{"plain", false, false}, {"packed", true, false}, {"packed after a step", true, true}} {
		if tc.packed && !hasKernel {
			continue // no kernel, nothing is packed
		}
		if tc.step {
			ex := Example{Tokens: seqTokens, Mask: make([]bool, len(seqTokens))}
			ex.Mask[len(ex.Mask)-1] = true
			if _, err := m.TrainStep(context.Background(), []Example{ex}, TrainOptions{LR: 0.05}); err != nil {
				t.Fatal(err)
			}
		}
		for _, promptLen := range []int{1, 5, 20} {
			dc := newDecoder(smallCfg, &m.p)
			if tc.packed {
				dc.pw = m.packedFor()
			}
			dc.kc = [][]float32{make([]float32, smallCfg.Layers*smallCfg.Context*smallCfg.DModel)}
			dc.vc = [][]float32{make([]float32, smallCfg.Layers*smallCfg.Context*smallCfg.DModel)}
			var cached [][]float32
			var seq, pos []int
			for t := range promptLen {
				seq, pos = append(seq, 0), append(pos, t)
			}
			cached = append(cached, slices.Clone(dc.step(seq, pos, seqTokens[:promptLen], []int{promptLen - 1})))
			for t := promptLen; t < len(seqTokens); t++ {
				cached = append(cached, slices.Clone(dc.step([]int{0}, []int{t}, seqTokens[t:t+1], []int{0})))
			}
			var ws workspace[float32]
			tg := make([]int, len(seqTokens))
			for i := range tg {
				tg[i] = -1
			}
			ws.prepare(smallCfg, [][]int{seqTokens}, [][]int{tg}, false)
			ws.forward(&m.p, true, 0)
			worst := 0.0
			for k, lg := range cached {
				row := promptLen - 1 + k
				full := ws.logits[row*V : (row+1)*V]
				for j := range lg {
					worst = math.Max(worst, math.Abs(float64(lg[j]-full[j])))
				}
			}
			if worst > 1e-3 {
				t.Errorf("%s, prompt %d: cached logits differ from full forward by %g", tc.name, promptLen, worst)
			}
		}
	}
}

func TestGenerateReproducible(t *testing.T) {
	m := newTestModel(t, smallCfg, 2)
	prompts := [][]int{EncodeText("hello"), EncodeText("a longer prompt here"), {TokBOS, TokUser, 'x', TokEnd, TokAssistant}}
	opts := SampleOptions{MaxNewTokens: 20, Temperature: 1, TopK: 50, TopP: 0.95, Seed: 42}
	ctx := context.Background()
	run := func(procs int, ps [][]int, o SampleOptions) []Generation {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		g, err := m.Generate(ctx, ps, o)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := run(2, prompts, opts)
	b := run(1, prompts, opts) // one group instead of two
	for i := range a {
		if !slices.Equal(a[i].Tokens, b[i].Tokens) {
			t.Errorf("prompt %d: %v with 2 groups, %v with 1", i, a[i].Tokens, b[i].Tokens)
		}
		if a[i].CompletionTokens != len(a[i].Tokens) || a[i].PromptTokens != len(prompts[i]) {
			t.Errorf("prompt %d: counts %d/%d", i, a[i].PromptTokens, a[i].CompletionTokens)
		}
	}
	// Prompts split across prefill chunks decode the same.
	func() {
		defer func(r int) { prefillRows = r }(prefillRows)
		prefillRows = 3
		e := run(2, prompts, opts)
		for i := range a {
			if !slices.Equal(a[i].Tokens, e[i].Tokens) {
				t.Errorf("prompt %d: %v with prefill chunks of 3 rows, %v without", i, e[i].Tokens, a[i].Tokens)
			}
		}
	}()
	// Prompt 1 alone (stream 0) differs from prompt 1 at index 1, but is the
	// same whatever its neighbours are when its index is the same.
	c := run(2, [][]int{EncodeText("zz"), prompts[1]}, opts)
	if !slices.Equal(c[1].Tokens, a[1].Tokens) {
		t.Errorf("prompt 1 depends on its neighbours: %v vs %v", c[1].Tokens, a[1].Tokens)
	}
	o2 := opts
	o2.Seed = 43
	d := run(2, prompts, o2)
	same := 0
	for i := range a {
		if slices.Equal(a[i].Tokens, d[i].Tokens) {
			same++
		}
	}
	if same == len(a) {
		t.Errorf("seed 43 gave the same tokens as seed 42")
	}
}

func TestGenerateLimits(t *testing.T) {
	m := newTestModel(t, smallCfg, 3)
	ctx := context.Background()
	g, err := m.Generate(ctx, [][]int{EncodeText("ab")}, SampleOptions{MaxNewTokens: 7, Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	if n := g[0].CompletionTokens; n > 7 || (n < 7 && g[0].FinishReason != "stop") {
		t.Errorf("%d tokens, finish %q", n, g[0].FinishReason)
	}
	long := EncodeText(string(make([]byte, smallCfg.Context-2)))
	g, err = m.Generate(ctx, [][]int{long}, SampleOptions{MaxNewTokens: 100, Temperature: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g[0].CompletionTokens > 2 {
		t.Errorf("generated %d tokens past a context of %d", g[0].CompletionTokens, smallCfg.Context)
	}
	for _, tc := range []struct {
		name    string
		prompts [][]int
		opts    SampleOptions
	}{
		{"no max", [][]int{{1}}, SampleOptions{}},
		{"empty prompt", [][]int{{}}, SampleOptions{MaxNewTokens: 1}},
		{"too long", [][]int{make([]int, smallCfg.Context+1)}, SampleOptions{MaxNewTokens: 1}},
		{"bad id", [][]int{{TokenizerVocab}}, SampleOptions{MaxNewTokens: 1}},
		{"top_p", [][]int{{1}}, SampleOptions{MaxNewTokens: 1, TopP: 2}},
	} {
		if _, err := m.Generate(ctx, tc.prompts, tc.opts); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Generate(cctx, [][]int{{1}}, SampleOptions{MaxNewTokens: 5}); err == nil {
		t.Error("cancelled context: no error")
	}
}

// TestOverfit trains on one conversation until greedy decoding writes the
// assistant's answer back.
func TestOverfit(t *testing.T) {
	cfg := Config{Vocab: TokenizerVocab, Layers: 2, DModel: 32, Heads: 2, DFF: 64, Context: 64}
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	msgs := chat("capital of France?", "Paris.")
	ids, mask, err := Encode(msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	batch := []Example{{ids, mask}, {ids, mask}}
	ctx := context.Background()
	opts := TrainOptions{LR: 1e-2, WeightDecay: 0.01, ClipNorm: 1}
	first, err := m.TrainStep(ctx, batch, opts)
	if err != nil {
		t.Fatal(err)
	}
	var last StepStats
	for range 150 {
		if last, err = m.TrainStep(ctx, batch, opts); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loss %.3f -> %.4f over %d steps", first.Loss, last.Loss, last.Step)
	if first.Tokens != 2*len("Paris.x") {
		t.Errorf("trained on %d tokens per step, want %d", first.Tokens, 2*len("Paris.x"))
	}
	if last.Loss > first.Loss/20 {
		t.Errorf("loss %.3f -> %.3f, want a 20-fold drop", first.Loss, last.Loss)
	}
	gen, err := m.GenerateChat(ctx, [][]schemas.Message{msgs[:1]}, SampleOptions{MaxNewTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if gen[0].Text != "Paris." || gen[0].FinishReason != "stop" {
		t.Errorf("generated %q (%s), want %q (stop)", gen[0].Text, gen[0].FinishReason, "Paris.")
	}
	if loss, n, err := m.Loss(ctx, batch); err != nil || n != first.Tokens || loss > first.Loss/20 {
		t.Errorf("Loss() = %v, %d, %v", loss, n, err)
	}
}

func TestTrainStepErrors(t *testing.T) {
	m := newTestModel(t, smallCfg, 4)
	ctx := context.Background()
	ok := TrainOptions{LR: 1e-3}
	for _, tc := range []struct {
		name  string
		batch []Example
		opts  TrainOptions
	}{
		{"empty", nil, ok},
		{"no mask", []Example{{[]int{1, 2, 3}, []bool{false, false, false}}}, ok},
		{"mask length", []Example{{[]int{1, 2, 3}, []bool{true}}}, ok},
		{"too long", []Example{{make([]int, smallCfg.Context+1), make([]bool, smallCfg.Context+1)}}, ok},
		{"bad id", []Example{{[]int{1, -1}, []bool{true, true}}}, ok},
		{"no lr", []Example{{[]int{1, 2}, []bool{true, true}}}, TrainOptions{}},
	} {
		if _, err := m.TrainStep(ctx, tc.batch, tc.opts); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if m.Step() != 0 {
		t.Errorf("step %d after failed steps", m.Step())
	}
}

func TestKthLargest(t *testing.T) {
	for _, tc := range []struct {
		v []float32
	}{
		{[]float32{3, 1, 2}},
		{[]float32{5, 5, 5, 5}},
		{[]float32{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{[]float32{9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2}},
		{[]float32{-1, 0.5, 0.5, 2, -3, 2, 7}},
	} {
		sorted := slices.Clone(tc.v)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		for k := 1; k <= len(tc.v); k++ {
			if got := kthLargest(slices.Clone(tc.v), k); got != sorted[k-1] {
				t.Errorf("kthLargest(%v, %d) = %v, want %v", tc.v, k, got, sorted[k-1])
			}
		}
	}
}

// TestTopKOneIsGreedy: keeping one candidate (top_k 1, or a tiny top_p)
// must give the arg-max whatever the temperature and seed.
func TestTopKOneIsGreedy(t *testing.T) {
	m := newTestModel(t, smallCfg, 6)
	ctx := context.Background()
	prompts := [][]int{EncodeText("abc"), EncodeText("hello world")}
	greedy, err := m.Generate(ctx, prompts, SampleOptions{MaxNewTokens: 15})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []SampleOptions{
		{MaxNewTokens: 15, Temperature: 2, TopK: 1, Seed: 5},
		{MaxNewTokens: 15, Temperature: 2, TopP: 1e-9, Seed: 6},
	} {
		got, err := m.Generate(ctx, prompts, o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !slices.Equal(got[i].Tokens, greedy[i].Tokens) {
				t.Errorf("%+v prompt %d: %v, greedy %v", o, i, got[i].Tokens, greedy[i].Tokens)
			}
		}
	}
}

// TestTrainStepShardingInvariant: splitting a batch over one or two
// workers changes only the order of float additions.
func TestTrainStepShardingInvariant(t *testing.T) {
	batch := benchBatch(smallCfg, 5, 40, 3)
	batch[2].Tokens = batch[2].Tokens[:11] // ragged
	batch[2].Mask = batch[2].Mask[:11]
	opts := TrainOptions{LR: 1e-3, WeightDecay: 0.1, ClipNorm: 0.5}
	var weights [][]float32
	var losses []float64
	for _, procs := range []int{1, 2} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			m := newTestModel(t, smallCfg, 8)
			var st StepStats
			var err error
			for range 3 {
				if st, err = m.TrainStep(context.Background(), batch, opts); err != nil {
					t.Fatal(err)
				}
			}
			weights = append(weights, m.p.flat)
			losses = append(losses, st.Loss)
		}()
	}
	if math.Abs(losses[0]-losses[1]) > 1e-5*losses[0] {
		t.Errorf("loss with 1 worker %v, with 2 %v", losses[0], losses[1])
	}
	var worst float64
	for i := range weights[0] {
		worst = math.Max(worst, math.Abs(float64(weights[0][i]-weights[1][i])))
	}
	if worst > 1e-5 {
		t.Errorf("weights after 3 steps differ by %g between 1 and 2 workers", worst)
	}
}
