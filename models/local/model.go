package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// Model is a decoder-only transformer with its optimiser state. Generate
// and Loss only read the weights and may run concurrently with each
// other; TrainStep writes them and needs the model to itself.
type Model struct {
	cfg  Config
	id   uint64 // from modelIDs: names the weights in a PrefixCache, with step
	p    params[float32]
	step int64
	opt  *adamState // nil until the first TrainStep or a checkpoint with one

	trainMu  sync.Mutex
	workers  []*trainWorker
	decoders sync.Pool // *decoder: buffers and KV caches reused across Generate calls

	packMu sync.Mutex
	packed *packedWeights // the decoder's weights as the kernel reads them; see packedFor
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Step is the number of optimiser steps taken so far.
func (m *Model) Step() int64 { return m.step }

// NumParams is the number of scalar parameters.
func (m *Model) NumParams() int { return len(m.p.flat) }

// New makes a model with weights drawn deterministically from seed:
// matrices and embeddings N(0, 0.02²), the two residual output
// projections of each block scaled by 1/sqrt(2·Layers), norm gains 1,
// biases 0. The output projection is not tied to the token embedding.
func New(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	flat := make([]float32, cfg.NumParams())
	initParams(cfg, seed, flat)
	return &Model{cfg: cfg, id: modelIDs.Add(1), p: bind(cfg, flat)}, nil
}

func initParams[T float](cfg Config, seed uint64, flat []T) {
	rng := rand.New(rand.NewPCG(seed, 0x77686c65))
	resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
	off := 0
	for _, s := range cfg.layout() {
		t := flat[off : off+s.size()]
		off += s.size()
		std := 0.02
		if len(s.Name) > 3 && (hasSuffix(s.Name, "attn.wo") || hasSuffix(s.Name, "mlp.w2")) {
			std = resid
		}
		switch {
		case len(s.Shape) == 2:
			for i := range t {
				t[i] = T(rng.NormFloat64() * std)
			}
		case hasSuffix(s.Name, ".g"):
			for i := range t {
				t[i] = 1
			}
		}
	}
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// Example is one training sequence: token ids and, per token, whether it
// is in the loss (Encode's mask: the model learns to predict exactly the
// tokens an assistant wrote).
type Example struct {
	Tokens []int
	Mask   []bool
}

// TrainOptions are the hyper-parameters of one step. The caller owns the
// schedule: pass the learning rate for this step.
type TrainOptions struct {
	LR          float64 // learning rate
	Beta1       float64 // default 0.9
	Beta2       float64 // default 0.95
	Eps         float64 // default 1e-8
	WeightDecay float64 // decoupled, on matrices and embeddings only
	ClipNorm    float64 // global gradient-norm clip; 0 disables
}

// StepStats describes one TrainStep.
type StepStats struct {
	Step     int64   // optimiser step after this one
	Loss     float64 // mean cross-entropy per masked token, before the update
	Tokens   int     // masked (trained) tokens
	Rows     int     // all tokens processed
	GradNorm float64 // global gradient norm before clipping
}

type trainWorker struct {
	ws   workspace[float32]
	grad []float32
	g    params[float32]
}

// checkBatch validates a batch and turns masks into per-row targets.
func (m *Model) checkBatch(batch []Example) (seqs, targets [][]int, count int, err error) {
	if len(batch) == 0 {
		return nil, nil, 0, errors.New("empty batch")
	}
	for i, ex := range batch {
		if len(ex.Tokens) < 2 || len(ex.Tokens) > m.cfg.Context {
			return nil, nil, 0, fmt.Errorf("example %d: %d tokens, want 2..%d (the context)", i, len(ex.Tokens), m.cfg.Context)
		}
		if len(ex.Mask) != len(ex.Tokens) {
			return nil, nil, 0, fmt.Errorf("example %d: %d mask flags for %d tokens", i, len(ex.Mask), len(ex.Tokens))
		}
		tg := make([]int, len(ex.Tokens))
		for t, tok := range ex.Tokens {
			if tok < 0 || tok >= m.cfg.Vocab {
				return nil, nil, 0, fmt.Errorf("example %d token %d: id %d outside vocab %d", i, t, tok, m.cfg.Vocab)
			}
			tg[t] = -1
			if t+1 < len(ex.Tokens) && ex.Mask[t+1] {
				tg[t] = ex.Tokens[t+1]
				count++
			}
		}
		seqs = append(seqs, ex.Tokens)
		targets = append(targets, tg)
	}
	if count == 0 {
		return nil, nil, 0, errors.New("batch has no masked tokens to train on")
	}
	return seqs, targets, count, nil
}

// shards splits n sequences into at most k contiguous groups of about
// equal token counts.
func shards(seqs [][]int, k int) [][2]int {
	total := 0
	for _, s := range seqs {
		total += len(s)
	}
	k = max(1, min(k, len(seqs)))
	var out [][2]int
	start, acc := 0, 0
	for i, s := range seqs {
		acc += len(s)
		left := k - len(out) - 1
		if left > 0 && acc*k >= total*(len(out)+1) && len(seqs)-i-1 >= left {
			out = append(out, [2]int{start, i + 1})
			start = i + 1
		}
	}
	return append(out, [2]int{start, len(seqs)})
}

func (m *Model) worker(i int) *trainWorker {
	for len(m.workers) <= i {
		w := &trainWorker{grad: make([]float32, len(m.p.flat))}
		w.g = bind(m.cfg, w.grad)
		m.workers = append(m.workers, w)
	}
	return m.workers[i]
}

// TrainStep runs forward and backward over batch, one goroutine per
// GOMAXPROCS on contiguous groups of examples with their own gradient
// buffers, sums the gradients, clips their global norm and applies AdamW.
// The loss is the cross-entropy summed over masked tokens and divided by
// their number in the whole batch.
func (m *Model) TrainStep(ctx context.Context, batch []Example, opts TrainOptions) (StepStats, error) {
	if err := ctx.Err(); err != nil {
		return StepStats{}, err
	}
	seqs, targets, count, err := m.checkBatch(batch)
	if err != nil {
		return StepStats{}, fmt.Errorf("train step %d: %w", m.step+1, err)
	}
	if opts.LR <= 0 || math.IsNaN(opts.LR) {
		return StepStats{}, fmt.Errorf("train step %d: learning rate %v, want > 0", m.step+1, opts.LR)
	}
	m.trainMu.Lock()
	defer m.trainMu.Unlock()
	groups := shards(seqs, runtime.GOMAXPROCS(0))
	losses := make([]float64, len(groups))
	scale := float32(1 / float64(count))
	var wg sync.WaitGroup
	for gi, gr := range groups {
		w := m.worker(gi)
		wg.Go(func() {
			clear(w.grad)
			w.ws.prepare(m.cfg, seqs[gr[0]:gr[1]], targets[gr[0]:gr[1]], true)
			losses[gi] = w.ws.forward(&m.p, false, scale)
			w.ws.backward(&m.p, &w.g)
		})
	}
	wg.Wait()
	grad := m.workers[0].grad
	for _, w := range m.workers[1:len(groups)] {
		axpyRow(grad, w.grad)
	}
	var loss float64
	for _, l := range losses {
		loss += l
	}
	rows := 0
	for _, s := range seqs {
		rows += len(s)
	}
	st := StepStats{Loss: loss / float64(count), Tokens: count, Rows: rows}
	var ss float64
	for _, g := range grad {
		ss += float64(g) * float64(g)
	}
	st.GradNorm = math.Sqrt(ss)
	if math.IsNaN(st.GradNorm) || math.IsInf(st.GradNorm, 0) {
		return st, fmt.Errorf("train step %d: gradient norm is %v; weights left unchanged", m.step+1, st.GradNorm)
	}
	if opts.ClipNorm > 0 && st.GradNorm > opts.ClipNorm {
		c := float32(opts.ClipNorm / st.GradNorm)
		for i := range grad {
			grad[i] *= c
		}
	}
	if m.opt == nil {
		// Fresh moments on weights that were already trained (a checkpoint
		// saved without optimiser state) need bias correction from their
		// own first step, not from the model's.
		m.opt = newAdam(m.cfg, len(m.p.flat))
		m.opt.start = m.step
	}
	m.step++
	m.opt.update(m.p.flat, grad, m.step-m.opt.start, opts)
	st.Step = m.step
	return st, nil
}

// Loss is the mean masked cross-entropy of batch under the current
// weights, and the number of masked tokens, without changing anything.
func (m *Model) Loss(ctx context.Context, batch []Example) (float64, int, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	seqs, targets, count, err := m.checkBatch(batch)
	if err != nil {
		return 0, 0, fmt.Errorf("loss: %w", err)
	}
	groups := shards(seqs, runtime.GOMAXPROCS(0))
	losses := make([]float64, len(groups))
	var wg sync.WaitGroup
	for gi, gr := range groups {
		wg.Go(func() {
			var ws workspace[float32]
			ws.prepare(m.cfg, seqs[gr[0]:gr[1]], targets[gr[0]:gr[1]], false)
			losses[gi] = ws.forward(&m.p, false, 0)
		})
	}
	wg.Wait()
	var loss float64
	for _, l := range losses {
		loss += l
	}
	return loss / float64(count), count, nil
}

// adamState is AdamW's first and second moments.
type adamState struct {
	m, v  []float32
	decay []bool // per tensor, in layout order
	sizes []int
	// start is the model's step when these moments began (not saved: a
	// checkpoint's moments are taken to span all its steps).
	start int64
}

func newAdam(cfg Config, n int) *adamState {
	a := &adamState{m: make([]float32, n), v: make([]float32, n)}
	for _, s := range cfg.layout() {
		a.decay = append(a.decay, s.decay)
		a.sizes = append(a.sizes, s.size())
	}
	return a
}

func (a *adamState) update(p, g []float32, step int64, o TrainOptions) {
	b1, b2, eps := o.Beta1, o.Beta2, o.Eps
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.95
	}
	if eps == 0 {
		eps = 1e-8
	}
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	stepSize := float32(o.LR / bc1)
	fb1, fb2 := float32(b1), float32(b2)
	ib2 := float32(1 / math.Sqrt(bc2))
	feps := float32(eps)
	off := 0
	for t, n := range a.sizes {
		wd := float32(1)
		if a.decay[t] {
			wd = float32(1 - o.LR*o.WeightDecay)
		}
		pp, gg, mm, vv := p[off:off+n], g[off:off+n], a.m[off:off+n], a.v[off:off+n]
		for i := range pp {
			gi := gg[i]
			mi := fb1*mm[i] + (1-fb1)*gi
			vi := fb2*vv[i] + (1-fb2)*gi*gi
			mm[i], vv[i] = mi, vi
			pp[i] = pp[i]*wd - stepSize*mi/(float32(math.Sqrt(float64(vi)))*ib2+feps)
		}
		off += n
	}
}
