package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/whalerun/whale/schemas"
)

// SampleOptions control Generate.
type SampleOptions struct {
	MaxNewTokens int     // most tokens to generate per prompt (> 0); the context also bounds it
	Temperature  float64 // 0 picks the most likely token
	TopK         int     // keep the K most likely tokens; 0 keeps all
	TopP         float64 // keep the smallest set with this much probability; 0 or 1 keeps all
	Seed         uint64  // prompt i draws from the PCG stream (Seed, i)
}

// Generation is what the model wrote for one prompt.
type Generation struct {
	Text             string // Decode of Tokens: bytes before the stop token
	Tokens           []int  // generated ids, the stop token included when one came
	PromptTokens     int
	CompletionTokens int    // len(Tokens)
	FinishReason     string // "stop" (an end token) or "length" (MaxNewTokens or the context)
}

// GenerateChat encodes each conversation with the chat template and a
// generation prompt, then calls Generate.
func (m *Model) GenerateChat(ctx context.Context, convs [][]schemas.Message, opts SampleOptions) ([]Generation, error) {
	prompts := make([][]int, len(convs))
	for i, c := range convs {
		ids, _, err := Encode(c, true)
		if err != nil {
			return nil, fmt.Errorf("conversation %d: %w", i, err)
		}
		prompts[i] = ids
	}
	return m.Generate(ctx, prompts, opts)
}

// Generate continues every prompt until an end token (<|end|> or
// <|eos|>), MaxNewTokens or the context. Prompts are split into one
// contiguous group per GOMAXPROCS, each decoded as a batch with a KV cache;
// a prompt's tokens depend only on its ids, its index and opts, not on the
// grouping or on scheduling.
func (m *Model) Generate(ctx context.Context, prompts [][]int, opts SampleOptions) ([]Generation, error) {
	each := make([]SampleOptions, len(prompts))
	streams := make([]uint64, len(prompts))
	for i := range prompts {
		each[i], streams[i] = opts, uint64(i)
	}
	return m.generate(ctx, prompts, each, streams, nil)
}

// GenerateEach is Generate with options per prompt, for a server that
// batches unrelated requests: prompt i is decoded under opts[i] and draws
// from the PCG stream (opts[i].Seed, 0), so it gets exactly the tokens
// Generate would give it alone with opts[i], whatever else is in the batch.
// With a cache (nil: none), prompts start from the rows of earlier
// sequences they extend, and every decoded sequence is offered to it.
func (m *Model) GenerateEach(ctx context.Context, prompts [][]int, opts []SampleOptions, cache *PrefixCache) ([]Generation, error) {
	if len(opts) != len(prompts) {
		return nil, fmt.Errorf("generate: %d options for %d prompts", len(opts), len(prompts))
	}
	return m.generate(ctx, prompts, opts, make([]uint64, len(prompts)), cache)
}

func (m *Model) generate(ctx context.Context, prompts [][]int, opts []SampleOptions, streams []uint64, cache *PrefixCache) ([]Generation, error) {
	for i, o := range opts {
		if o.MaxNewTokens <= 0 {
			return nil, fmt.Errorf("generate: prompt %d: max new tokens %d, want > 0", i, o.MaxNewTokens)
		}
		if o.Temperature < 0 || math.IsNaN(o.Temperature) || o.TopK < 0 || o.TopP < 0 || o.TopP > 1 {
			return nil, fmt.Errorf("generate: prompt %d: temperature %v, top_k %d, top_p %v out of range", i, o.Temperature, o.TopK, o.TopP)
		}
	}
	for i, p := range prompts {
		if len(p) == 0 || len(p) > m.cfg.Context {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens, want 1..%d (the context)", i, len(p), m.cfg.Context)
		}
		for t, id := range p {
			if id < 0 || id >= m.cfg.Vocab {
				return nil, fmt.Errorf("generate: prompt %d token %d: id %d outside vocab %d", i, t, id, m.cfg.Vocab)
			}
		}
	}
	out := make([]Generation, len(prompts))
	if len(prompts) == 0 {
		return out, nil
	}
	key, pw := m.cacheKey(), m.packedFor()
	groups := shards(prompts, runtime.GOMAXPROCS(0))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, gr := range groups {
		wg.Go(func() {
			d, _ := m.decoders.Get().(*decoder)
			if d == nil || d.cfg != m.cfg {
				d = newDecoder(m.cfg, &m.p)
			}
			d.pw = pw
			a, b := gr[0], gr[1]
			errs[gi] = d.run(ctx, cache, key, prompts[a:b], streams[a:b], opts[a:b], out[a:b])
			m.decoders.Put(d)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return out, nil
}

// prefillRows bounds the rows of one prompt-processing step.
var prefillRows = 2048

// decoder runs the network on rows that each carry one token of one
// sequence, reading and extending that sequence's KV cache.
type decoder struct {
	cfg Config
	p   *params[float32]
	pw  *packedWeights // nil without the sgemm kernel

	kc, vc [][]float32 // per sequence: Layers × Heads × capacity × head width
	slab   []float32   // backs kc and vc, kept across calls

	x, n, qkv, att, h, a, r []float32
	lg, logits              []float32
	scores                  []float32
	probs                   []float64
	vals                    []float32
	idx                     []int
}

func newDecoder(cfg Config, p *params[float32]) *decoder {
	return &decoder{cfg: cfg, p: p, scores: make([]float32, cfg.Context), probs: make([]float64, cfg.Vocab), idx: make([]int, cfg.Vocab), vals: make([]float32, cfg.Vocab)}
}

func (dc *decoder) size(rows, lrows int) {
	d, f := dc.cfg.DModel, dc.cfg.DFF
	dc.x = grow(dc.x, rows*d)
	dc.n = grow(dc.n, rows*d)
	dc.qkv = grow(dc.qkv, rows*3*d)
	dc.att = grow(dc.att, rows*d)
	dc.h = grow(dc.h, rows*d)
	dc.a = grow(dc.a, rows*f)
	dc.r = grow(dc.r, rows)
	dc.lg = grow(dc.lg, lrows*d)
	dc.logits = grow(dc.logits, lrows*dc.cfg.Vocab)
}

// step runs rows (sequence, position, token) through the network; all
// rows' keys and values enter the caches before any row attends, so a
// prompt can be fed as one step. It returns logits for logitRows.
func (dc *decoder) step(seq, pos, tok []int, logitRows []int) []float32 {
	cfg, p := dc.cfg, dc.p
	d, f, nh := cfg.DModel, cfg.DFF, cfg.Heads
	hd := d / nh
	R := len(tok)
	dc.size(R, len(logitRows))
	x := dc.x[:R*d]
	for i := 0; i < R; i++ {
		row := x[i*d : (i+1)*d]
		te, pe := p.wte[tok[i]*d:], p.wpe[pos[i]*d:]
		for j := range row {
			row[j] = te[j] + pe[j]
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	for l := 0; l < cfg.Layers; l++ {
		lp, pl := &p.layers[l], dc.pw.layer(l)
		rmsNorm(R, d, x, lp.ln1g, dc.n, dc.r)
		dc.linear(R, d, 3*d, dc.n, lp.wqkv, pl.qkv, lp.bqkv, dc.qkv)
		for i := 0; i < R; i++ {
			capa := len(dc.kc[seq[i]]) / (cfg.Layers * d)
			for h := 0; h < nh; h++ {
				o := ((l*nh+h)*capa + pos[i]) * hd
				src := dc.qkv[i*3*d+h*hd:]
				copy(dc.kc[seq[i]][o:o+hd], src[d:d+hd])
				copy(dc.vc[seq[i]][o:o+hd], src[2*d:2*d+hd])
			}
		}
		for i := 0; i < R; i++ {
			capa := len(dc.kc[seq[i]]) / (cfg.Layers * d)
			L := pos[i] + 1
			s := dc.scores[:L]
			for h := 0; h < nh; h++ {
				o := (l*nh + h) * capa * hd
				q := dc.qkv[i*3*d+h*hd : i*3*d+(h+1)*hd]
				attnScores(q, dc.kc[seq[i]][o:o+L*hd], s, hd, scale)
				// Not the max builtin: its NaN rules cost more than the
				// whole softmax (7 s of a 72 s profile of whale demo --quick).
				mx := s[0]
				for _, v := range s {
					if v > mx {
						mx = v
					}
				}
				var sum float32
				for j, v := range s {
					e := float32(math.Exp(float64(v - mx)))
					s[j] = e
					sum += e
				}
				inv := 1 / sum
				for j := range s {
					s[j] *= inv
				}
				attnMix(s, dc.vc[seq[i]][o:o+L*hd], dc.att[i*d+h*hd:i*d+(h+1)*hd], hd)
			}
		}
		dc.linear(R, d, d, dc.att, lp.wo, pl.o, lp.bo, dc.h)
		axpyRow(dc.h[:R*d], x)
		rmsNorm(R, d, dc.h, lp.ln2g, dc.n, dc.r)
		dc.linear(R, d, f, dc.n, lp.w1, pl.w1, lp.b1, dc.a)
		for j, v := range dc.a[:R*f] {
			if v < 0 {
				dc.a[j] = 0
			}
		}
		dc.linear(R, f, d, dc.a, lp.w2, pl.w2, lp.b2, x)
		axpyRow(x, dc.h[:R*d])
	}
	nlr := len(logitRows)
	for k, i := range logitRows {
		copy(dc.lg[k*d:(k+1)*d], x[i*d:(i+1)*d])
	}
	rmsNorm(nlr, d, dc.lg, p.lnfg, dc.n, dc.r)
	dc.linear(nlr, d, cfg.Vocab, dc.n, p.outw, dc.pw.outw(), p.outb, dc.logits)
	return dc.logits[:nlr*cfg.Vocab]
}

type seqState struct {
	tokens []int // prompt then generated
	prompt int
	rng    *rand.Rand
	done   bool
	reason string
}

func (dc *decoder) run(ctx context.Context, cache *PrefixCache, key uint64, prompts [][]int, streams []uint64, opts []SampleOptions, out []Generation) error {
	cfg := dc.cfg
	st := make([]seqState, len(prompts))
	dc.kc = grow(dc.kc, len(prompts))
	dc.vc = grow(dc.vc, len(prompts))
	need := 0
	for i, p := range prompts {
		need += 2 * cfg.Layers * min(cfg.Context, len(p)+opts[i].MaxNewTokens) * cfg.DModel
	}
	// Every cache slot is written before it is read, so the slab is
	// reused without clearing.
	dc.slab = grow(dc.slab, need)
	off := 0
	var seq, pos, tok, lrows, live []int
	for i, p := range prompts {
		n := cfg.Layers * min(cfg.Context, len(p)+opts[i].MaxNewTokens) * cfg.DModel
		dc.kc[i] = dc.slab[off : off+n : off+n]
		dc.vc[i] = dc.slab[off+n : off+2*n : off+2*n]
		off += 2 * n
		st[i] = seqState{tokens: slices.Clone(p), prompt: len(p), rng: rand.New(rand.NewPCG(opts[i].Seed, streams[i]))}
		from := 0
		if cache != nil {
			from = dc.reuse(cache, key, i, p)
		}
		for t := from; t < len(p); t++ {
			seq, pos, tok = append(seq, i), append(pos, t), append(tok, p[t])
		}
		lrows = append(lrows, len(tok)-1)
		live = append(live, i)
	}
	V := cfg.Vocab
	// The prompts go in chunks of at most prefillRows rows, so memory stays
	// bounded however many prompts there are; a chunk boundary may split a
	// prompt, whose later rows then attend to the cached earlier ones.
	first := make([]float32, len(prompts)*V)
	for a := 0; a < len(tok); a += prefillRows {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := min(len(tok), a+prefillRows)
		var want, owners []int
		for i, r := range lrows {
			if r >= a && r < b {
				want, owners = append(want, r-a), append(owners, i)
			}
		}
		logits := dc.step(seq[a:b], pos[a:b], tok[a:b], want)
		for k, i := range owners {
			copy(first[i*V:(i+1)*V], logits[k*V:(k+1)*V])
		}
	}
	logits := first
	for len(live) > 0 {
		if logits == nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			logits = dc.step(seq, pos, tok, lrows)
		}
		for k, i := range live {
			s := &st[i]
			id := dc.sample(logits[k*V:(k+1)*V], s.rng, opts[i])
			s.tokens = append(s.tokens, id)
			switch {
			case isStop(id):
				s.done, s.reason = true, "stop"
			case len(s.tokens)-s.prompt >= opts[i].MaxNewTokens || len(s.tokens) >= cfg.Context:
				s.done, s.reason = true, "length"
			}
		}
		seq, pos, tok, lrows = seq[:0], pos[:0], tok[:0], lrows[:0]
		next := live[:0]
		for _, i := range live {
			s := &st[i]
			if s.done {
				continue
			}
			next = append(next, i)
			lrows = append(lrows, len(seq))
			seq, pos, tok = append(seq, i), append(pos, len(s.tokens)-1), append(tok, s.tokens[len(s.tokens)-1])
		}
		live = next
		logits = nil
	}
	for i := range st {
		if cache != nil {
			dc.offer(cache, key, i, st[i].tokens[:len(st[i].tokens)-1])
		}
		gen := st[i].tokens[st[i].prompt:]
		text, _ := Decode(gen)
		out[i] = Generation{Text: text, Tokens: gen, PromptTokens: st[i].prompt, CompletionTokens: len(gen), FinishReason: st[i].reason}
	}
	return nil
}

// sample draws one token id from logits under opts; with temperature 0
// it is the arg-max and draws nothing from rng.
func (dc *decoder) sample(logits []float32, rng *rand.Rand, opts SampleOptions) int {
	if opts.Temperature == 0 {
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		return best
	}
	idx := dc.idx[:0]
	if opts.TopK > 0 && opts.TopK < len(logits) {
		// The K-th largest logit by selection, then the ids above it and
		// the lowest-numbered ties, so the kept set is well defined.
		vals := append(dc.vals[:0], logits...)
		thr := kthLargest(vals, opts.TopK)
		for j, v := range logits {
			if v > thr {
				idx = append(idx, j)
			}
		}
		for j, v := range logits {
			if v == thr && len(idx) < opts.TopK {
				idx = append(idx, j)
			}
		}
	} else {
		for j := range logits {
			idx = append(idx, j)
		}
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		slices.SortFunc(idx, func(a, b int) int {
			if logits[a] != logits[b] {
				if logits[a] > logits[b] {
					return -1
				}
				return 1
			}
			return a - b
		})
	}
	mx := logits[idx[0]]
	for _, j := range idx {
		mx = max(mx, logits[j])
	}
	invT := 1 / opts.Temperature
	pr := dc.probs[:len(idx)]
	var sum float64
	for n, j := range idx {
		e := math.Exp(float64(logits[j]-mx) * invT)
		pr[n] = e
		sum += e
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		var acc float64
		for n := range pr {
			acc += pr[n]
			if acc >= opts.TopP*sum {
				pr = pr[:n+1]
				idx = idx[:n+1]
				break
			}
		}
		sum = acc
	}
	u := rng.Float64() * sum
	for n, e := range pr {
		u -= e
		if u < 0 {
			return idx[n]
		}
	}
	return idx[len(idx)-1]
}

// kthLargest returns the k-th largest value (1-based) of v, reordering v.
func kthLargest(v []float32, k int) float32 {
	lo, hi, want := 0, len(v)-1, k-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three as the pivot keeps sorted input linear.
		a, b, c := v[lo], v[mid], v[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return v[want]
		}
	}
	return v[want]
}
