package local

import (
	"math"
)

const normEps = 1e-5

// attBlock is the row block of causal attention in training: scores right
// of a block's diagonal are never computed. A variable so tests can make
// it smaller than their sequences.
var attBlock = 64

func sqrtf(x float64) float64 { return math.Sqrt(x) }

// span is one sequence's rows in a workspace.
type span struct{ off, n, poff int }

type layerActs[T float] struct {
	xin, n1, r1, qkv, att, h, n2, r2, a []T
	probs                               []T // attention probabilities, per span and head, n×n each
}

// workspace holds the activations of one forward pass over a group of
// sequences laid end to end, and the buffers of its backward pass. It is
// reused across steps so the hot loop does not allocate.
type workspace[T float] struct {
	cfg      Config
	rows     int
	spans    []span
	tokens   []int
	pos      []int
	targets  []int // next token when the row is in the loss, else -1
	acts     []layerActs[T]
	xf, nf   []T
	rf       []T
	lossRows []int
	gath     []T // nf rows of lossRows
	logits   []T // logits, then dlogits

	dx, dh, dn, datt []T
	dqkv, da, dp     []T
	dgath            []T
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// prepare lays out seqs (tokens; targets per row, -1 outside the loss)
// and sizes every buffer.
func (w *workspace[T]) prepare(cfg Config, seqs [][]int, targets [][]int, backward bool) {
	w.cfg = cfg
	d, f, h := cfg.DModel, cfg.DFF, cfg.Heads
	w.spans = w.spans[:0]
	rows, probs, maxN := 0, 0, 0
	for _, s := range seqs {
		w.spans = append(w.spans, span{off: rows, n: len(s), poff: probs})
		rows += len(s)
		probs += h * len(s) * len(s)
		maxN = max(maxN, len(s))
	}
	w.rows = rows
	w.tokens = grow(w.tokens, rows)
	w.pos = grow(w.pos, rows)
	w.targets = grow(w.targets, rows)
	w.lossRows = w.lossRows[:0]
	for i, s := range seqs {
		off := w.spans[i].off
		for t, tok := range s {
			w.tokens[off+t] = tok
			w.pos[off+t] = t
			w.targets[off+t] = targets[i][t]
		}
	}
	if len(w.acts) != cfg.Layers {
		w.acts = make([]layerActs[T], cfg.Layers)
	}
	for l := range w.acts {
		a := &w.acts[l]
		a.xin = grow(a.xin, rows*d)
		a.n1 = grow(a.n1, rows*d)
		a.r1 = grow(a.r1, rows)
		a.qkv = grow(a.qkv, rows*3*d)
		a.att = grow(a.att, rows*d)
		a.h = grow(a.h, rows*d)
		a.n2 = grow(a.n2, rows*d)
		a.r2 = grow(a.r2, rows)
		a.a = grow(a.a, rows*f)
		a.probs = grow(a.probs, probs)
	}
	w.xf = grow(w.xf, rows*d)
	w.nf = grow(w.nf, rows*d)
	w.rf = grow(w.rf, rows)
	if backward {
		w.dx = grow(w.dx, rows*d)
		w.dh = grow(w.dh, rows*d)
		w.dn = grow(w.dn, rows*d)
		w.datt = grow(w.datt, rows*d)
		w.dqkv = grow(w.dqkv, rows*3*d)
		w.da = grow(w.da, rows*f)
		w.dp = grow(w.dp, maxN*maxN)
	}
}

// forward runs the network over the prepared rows. With allLogits every
// row gets logits (for tests); otherwise only rows with a target do,
// which is all the loss needs. It returns the summed cross-entropy over
// target rows and, when scale is not zero, leaves
// scale·(softmax − onehot) in w.logits for backward.
func (w *workspace[T]) forward(p *params[T], allLogits bool, scale T) float64 {
	cfg := w.cfg
	d, f, nh := cfg.DModel, cfg.DFF, cfg.Heads
	hd := d / nh
	n := w.rows
	x := w.acts[0].xin
	for i := 0; i < n; i++ {
		row := x[i*d : (i+1)*d]
		te := p.wte[w.tokens[i]*d:]
		pe := p.wpe[w.pos[i]*d:]
		for j := range row {
			row[j] = te[j] + pe[j]
		}
	}
	attScale := T(1 / math.Sqrt(float64(hd)))
	for l := 0; l < cfg.Layers; l++ {
		a := &w.acts[l]
		lp := &p.layers[l]
		out := w.xf
		if l+1 < cfg.Layers {
			out = w.acts[l+1].xin
		}
		rmsNorm(n, d, a.xin, lp.ln1g, a.n1, a.r1)
		linear(n, d, 3*d, a.n1, lp.wqkv, lp.bqkv, a.qkv)
		for _, s := range w.spans {
			for h := 0; h < nh; h++ {
				pr := a.probs[s.poff+h*s.n*s.n : s.poff+(h+1)*s.n*s.n]
				q := a.qkv[s.off*3*d+h*hd:]
				k := a.qkv[s.off*3*d+d+h*hd:]
				v := a.qkv[s.off*3*d+2*d+h*hd:]
				o := a.att[s.off*d+h*hd:]
				// Row blocks skip the scores above the diagonal block.
				for r0 := 0; r0 < s.n; r0 += attBlock {
					r1 := min(s.n, r0+attBlock)
					gemm(false, true, r1-r0, r1, hd, attScale, q[r0*3*d:], 3*d, k, 3*d, 0, pr[r0*s.n:], s.n)
				}
				causalSoftmax(s.n, pr)
				for r0 := 0; r0 < s.n; r0 += attBlock {
					r1 := min(s.n, r0+attBlock)
					gemm(false, false, r1-r0, hd, r1, 1, pr[r0*s.n:], s.n, v, 3*d, 0, o[r0*d:], d)
				}
			}
		}
		linear(n, d, d, a.att, lp.wo, lp.bo, a.h)
		axpyRow(a.h[:n*d], a.xin[:n*d])
		rmsNorm(n, d, a.h, lp.ln2g, a.n2, a.r2)
		linear(n, d, f, a.n2, lp.w1, lp.b1, a.a)
		for i, v := range a.a[:n*f] {
			if v < 0 {
				a.a[i] = 0
			}
		}
		linear(n, f, d, a.a, lp.w2, lp.b2, out)
		axpyRow(out[:n*d], a.h[:n*d])
	}
	rmsNorm(n, d, w.xf, p.lnfg, w.nf, w.rf)

	w.lossRows = w.lossRows[:0]
	for i := 0; i < n; i++ {
		if allLogits || w.targets[i] >= 0 {
			w.lossRows = append(w.lossRows, i)
		}
	}
	nl, V := len(w.lossRows), cfg.Vocab
	w.gath = grow(w.gath, nl*d)
	w.logits = grow(w.logits, nl*V)
	for r, i := range w.lossRows {
		copy(w.gath[r*d:(r+1)*d], w.nf[i*d:(i+1)*d])
	}
	linear(nl, d, V, w.gath, p.outw, p.outb, w.logits)
	var loss float64
	for r, i := range w.lossRows {
		t := w.targets[i]
		if t < 0 {
			continue
		}
		row := w.logits[r*V : (r+1)*V]
		mx := row[0]
		for _, v := range row {
			mx = max(mx, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v - mx))
		}
		loss += math.Log(sum) - float64(row[t]-mx)
		if scale != 0 {
			inv := 1 / sum
			for j, v := range row {
				row[j] = T(math.Exp(float64(v-mx))*inv) * scale
			}
			row[t] -= scale
		}
	}
	return loss
}

// causalSoftmax normalises each row i of the n×n scores over columns ≤ i
// and zeroes the rest.
func causalSoftmax[T float](n int, s []T) {
	for i := 0; i < n; i++ {
		row := s[i*n : (i+1)*n]
		mx := row[0]
		for _, v := range row[:i+1] {
			mx = max(mx, v)
		}
		var sum T
		for j, v := range row[:i+1] {
			e := T(math.Exp(float64(v - mx)))
			row[j] = e
			sum += e
		}
		inv := 1 / sum
		for j := range row[:i+1] {
			row[j] *= inv
		}
		clear(row[i+1:])
	}
}

// backward accumulates into g the gradient of the loss whose dlogits
// forward left in w.logits. Rows without a target in the loss get none
// unless allLogits put them there.
func (w *workspace[T]) backward(p, g *params[T]) {
	cfg := w.cfg
	d, f, nh, V := cfg.DModel, cfg.DFF, cfg.Heads, cfg.Vocab
	hd := d / nh
	n, nl := w.rows, len(w.lossRows)
	attScale := T(1 / math.Sqrt(float64(hd)))

	w.dgath = grow(w.dgath, nl*d)
	linearBack(nl, d, V, w.gath, p.outw, w.logits, g.outw, g.outb, w.dgath, false)
	dn := w.dn[:n*d]
	clear(dn)
	for r, i := range w.lossRows {
		copy(dn[i*d:(i+1)*d], w.dgath[r*d:(r+1)*d])
	}
	dx := w.dx[:n*d]
	clear(dx)
	rmsNormBack(n, d, w.xf, p.lnfg, w.rf, dn, dx, g.lnfg)

	dh := w.dh[:n*d]
	for l := cfg.Layers - 1; l >= 0; l-- {
		a := &w.acts[l]
		lp, lg := &p.layers[l], &g.layers[l]
		// MLP: out = h + relu(n2·W1+b1)·W2 + b2.
		linearBack(n, f, d, a.a, lp.w2, dx, lg.w2, lg.b2, w.da, false)
		for i, v := range a.a[:n*f] {
			if v <= 0 {
				w.da[i] = 0
			}
		}
		linearBack(n, d, f, a.n2, lp.w1, w.da, lg.w1, lg.b1, dn, false)
		copy(dh, dx)
		rmsNormBack(n, d, a.h, lp.ln2g, a.r2, dn, dh, lg.ln2g)
		// Attention: h = xin + att·Wo + bo.
		linearBack(n, d, d, a.att, lp.wo, dh, lg.wo, lg.bo, w.datt, false)
		for _, s := range w.spans {
			for h := 0; h < nh; h++ {
				pr := a.probs[s.poff+h*s.n*s.n : s.poff+(h+1)*s.n*s.n]
				base := s.off * 3 * d
				q, k, v := a.qkv[base+h*hd:], a.qkv[base+d+h*hd:], a.qkv[base+2*d+h*hd:]
				dq, dk, dv := w.dqkv[base+h*hd:], w.dqkv[base+d+h*hd:], w.dqkv[base+2*d+h*hd:]
				do := w.datt[s.off*d+h*hd:]
				dp := w.dp[:s.n*s.n]
				for r0 := 0; r0 < s.n; r0 += attBlock {
					r1 := min(s.n, r0+attBlock)
					gemm(false, true, r1-r0, r1, hd, 1, do[r0*d:], d, v, 3*d, 0, dp[r0*s.n:], s.n)
					// Key block [r0, r1) is seen by queries r0..n-1 only.
					gemm(true, false, r1-r0, hd, s.n-r0, 1, pr[r0*s.n+r0:], s.n, do[r0*d:], d, 0, dv[r0*3*d:], 3*d)
				}
				for i := 0; i < s.n; i++ {
					prow, drow := pr[i*s.n:i*s.n+i+1], dp[i*s.n:(i+1)*s.n]
					var c T
					for j, pv := range prow {
						c += pv * drow[j]
					}
					for j, pv := range prow {
						drow[j] = pv * (drow[j] - c)
					}
					clear(drow[i+1:])
				}
				for r0 := 0; r0 < s.n; r0 += attBlock {
					r1 := min(s.n, r0+attBlock)
					gemm(false, false, r1-r0, hd, r1, attScale, dp[r0*s.n:], s.n, k, 3*d, 0, dq[r0*3*d:], 3*d)
					gemm(true, false, r1-r0, hd, s.n-r0, attScale, dp[r0*s.n+r0:], s.n, q[r0*3*d:], 3*d, 0, dk[r0*3*d:], 3*d)
				}
			}
		}
		linearBack(n, d, 3*d, a.n1, lp.wqkv, w.dqkv, lg.wqkv, lg.bqkv, dn, false)
		copy(dx, dh)
		rmsNormBack(n, d, a.xin, lp.ln1g, a.r1, dn, dx, lg.ln1g)
	}
	for i := 0; i < n; i++ {
		row := dx[i*d : (i+1)*d]
		axpyRow(g.wte[w.tokens[i]*d:(w.tokens[i]+1)*d], row)
		axpyRow(g.wpe[w.pos[i]*d:(w.pos[i]+1)*d], row)
	}
}
