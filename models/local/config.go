package local

import (
	"errors"
	"fmt"
)

// Config is the shape of a model. All fields are required; Validate says
// which one is wrong.
type Config struct {
	Vocab   int `json:"vocab"`   // token ids are 0..Vocab-1; the byte tokenizer needs TokenizerVocab
	Layers  int `json:"layers"`  // transformer blocks
	DModel  int `json:"d_model"` // residual width
	Heads   int `json:"heads"`   // attention heads; must divide DModel
	DFF     int `json:"d_ff"`    // MLP hidden width
	Context int `json:"context"` // longest sequence (learned positions)
}

// DemoConfig is the model whale's demo trains and serves: small enough to
// fine-tune on two CPU cores in minutes, large enough to learn a
// byte-level chat format.
func DemoConfig() Config {
	return Config{Vocab: TokenizerVocab, Layers: 2, DModel: 128, Heads: 4, DFF: 512, Context: 256}
}

// Validate reports the first field that cannot make a model.
func (c Config) Validate() error {
	var errs []error
	check := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("config %s = %d, want %d..%d", name, v, lo, hi))
		}
	}
	check("vocab", c.Vocab, 2, 1<<20)
	check("layers", c.Layers, 1, 256)
	check("d_model", c.DModel, 1, 1<<14)
	check("heads", c.Heads, 1, 1<<10)
	check("d_ff", c.DFF, 1, 1<<16)
	check("context", c.Context, 2, 1<<16)
	if len(errs) == 0 && c.DModel%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("config d_model = %d is not a multiple of heads = %d", c.DModel, c.Heads))
	}
	return errors.Join(errs...)
}

// tensorSpec names one parameter tensor in the fixed checkpoint order.
type tensorSpec struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	decay bool   // AdamW weight decay applies (matrices and embeddings)
}

func (s tensorSpec) size() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// layout lists every parameter tensor in checkpoint order. bind relies on
// the same order.
func (c Config) layout() []tensorSpec {
	d, f, v := c.DModel, c.DFF, c.Vocab
	specs := []tensorSpec{
		{"wte", []int{v, d}, true},
		{"wpe", []int{c.Context, d}, true},
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("h%d.", l)
		specs = append(specs,
			tensorSpec{p + "ln1.g", []int{d}, false},
			tensorSpec{p + "attn.wqkv", []int{d, 3 * d}, true},
			tensorSpec{p + "attn.bqkv", []int{3 * d}, false},
			tensorSpec{p + "attn.wo", []int{d, d}, true},
			tensorSpec{p + "attn.bo", []int{d}, false},
			tensorSpec{p + "ln2.g", []int{d}, false},
			tensorSpec{p + "mlp.w1", []int{d, f}, true},
			tensorSpec{p + "mlp.b1", []int{f}, false},
			tensorSpec{p + "mlp.w2", []int{f, d}, true},
			tensorSpec{p + "mlp.b2", []int{d}, false},
		)
	}
	specs = append(specs,
		tensorSpec{"lnf.g", []int{d}, false},
		tensorSpec{"out.w", []int{d, v}, true},
		tensorSpec{"out.b", []int{v}, false},
	)
	return specs
}

// NumParams is the number of scalar parameters.
func (c Config) NumParams() int {
	n := 0
	for _, s := range c.layout() {
		n += s.size()
	}
	return n
}

// FLOPsPerToken estimates the forward multiply-adds×2 for one token at
// position pos (attention cost grows with pos). Training costs about three
// times this.
func (c Config) FLOPsPerToken(pos int) float64 {
	d, f := float64(c.DModel), float64(c.DFF)
	perLayer := 2*(d*3*d+d*d+2*d*f) + 4*float64(pos+1)*d
	return float64(c.Layers)*perLayer + 2*d*float64(c.Vocab)
}

type layerParams[T float] struct {
	ln1g, wqkv, bqkv, wo, bo, ln2g, w1, b1, w2, b2 []T
}

// params are views into one flat slice, so optimiser, clipping, reduction
// and checkpointing treat the model as a single vector.
type params[T float] struct {
	flat             []T
	wte, wpe         []T
	layers           []layerParams[T]
	lnfg, outw, outb []T
}

func bind[T float](c Config, flat []T) params[T] {
	off := 0
	take := func(s tensorSpec) []T {
		n := s.size()
		v := flat[off : off+n : off+n]
		off += n
		return v
	}
	specs := c.layout()
	i := 0
	next := func() []T { v := take(specs[i]); i++; return v }
	p := params[T]{flat: flat}
	p.wte, p.wpe = next(), next()
	p.layers = make([]layerParams[T], c.Layers)
	for l := range p.layers {
		lp := &p.layers[l]
		lp.ln1g, lp.wqkv, lp.bqkv, lp.wo, lp.bo = next(), next(), next(), next(), next()
		lp.ln2g, lp.w1, lp.b1, lp.w2, lp.b2 = next(), next(), next(), next(), next()
	}
	p.lnfg, p.outw, p.outb = next(), next(), next()
	if off != len(flat) {
		panic(fmt.Sprintf("local: layout covers %d of %d parameters", off, len(flat)))
	}
	return p
}
