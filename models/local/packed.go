package local

// linear is the network's linear layer, from packed weights when the
// kernel has them.
func (dc *decoder) linear(n, in, out int, x, w, packed, b, y []float32) {
	if packed != nil {
		linearPacked(n, in, out, x, packed, b, y)
		return
	}
	linear(n, in, out, x, w, b, y)
}

// packedWeights holds the decoder's weight matrices packed by packB for
// the model's weights at step.
type packedWeights struct {
	step   int64
	layers []packedLayer
	out    []float32 // the output projection
}

type packedLayer struct{ qkv, o, w1, w2 []float32 }

// layer returns layer l's matrices; none from a nil receiver (no kernel).
func (pw *packedWeights) layer(l int) packedLayer {
	if pw == nil {
		return packedLayer{}
	}
	return pw.layers[l]
}

func (pw *packedWeights) outw() []float32 {
	if pw == nil {
		return nil
	}
	return pw.out
}

// packedFor returns the weights packed for the model's current step,
// packing them on the first call after a TrainStep; nil without the
// kernel.
func (m *Model) packedFor() *packedWeights {
	if !hasKernel {
		return nil
	}
	m.packMu.Lock()
	defer m.packMu.Unlock()
	if m.packed != nil && m.packed.step == m.step {
		return m.packed
	}
	d, f := m.cfg.DModel, m.cfg.DFF
	pw := &packedWeights{step: m.step}
	for _, lp := range m.p.layers {
		pw.layers = append(pw.layers, packedLayer{
			qkv: packB(false, 3*d, d, lp.wqkv, 3*d, nil),
			o:   packB(false, d, d, lp.wo, d, nil),
			w1:  packB(false, f, d, lp.w1, f, nil),
			w2:  packB(false, d, f, lp.w2, d, nil),
		})
	}
	pw.out = packB(false, m.cfg.Vocab, d, m.p.outw, m.cfg.Vocab, nil)
	m.packed = pw
	return pw
}
