package local

import (
	"math"
	"strings"
	"testing"
)

var tinyCfg = Config{Vocab: 11, Layers: 2, DModel: 8, Heads: 2, DFF: 12, Context: 8}

// tinyBatch has ragged lengths and masks with holes, so the gradient check
// covers span offsets, rows outside the loss and the causal mask.
func tinyBatch() ([][]int, [][]int) {
	seqs := [][]int{{1, 4, 2, 9, 3, 3, 7}, {5, 0, 10, 2}, {8, 8}}
	masks := [][]bool{{false, false, true, true, false, true, true}, {false, true, true, true}, {false, true}}
	targets := make([][]int, len(seqs))
	for i, s := range seqs {
		targets[i] = make([]int, len(s))
		for t := range s {
			targets[i][t] = -1
			if t+1 < len(s) && masks[i][t+1] {
				targets[i][t] = s[t+1]
			}
		}
	}
	return seqs, targets
}

func lossAndGrad[T float](cfg Config, flat []T, seqs, targets [][]int) (float64, []T) {
	p := bind(cfg, flat)
	grad := make([]T, len(flat))
	g := bind(cfg, grad)
	var ws workspace[T]
	ws.prepare(cfg, seqs, targets, true)
	loss := ws.forward(&p, false, 1)
	ws.backward(&p, &g)
	return loss, grad
}

func lossOnly[T float](cfg Config, flat []T, seqs, targets [][]int) float64 {
	p := bind(cfg, flat)
	var ws workspace[T]
	ws.prepare(cfg, seqs, targets, false)
	return ws.forward(&p, false, 0)
}

// TestGradientCheck compares the hand-written backward pass of every
// tensor with central finite differences in float64.
func TestGradientCheck(t *testing.T) {
	defer func(b int) { attBlock = b }(attBlock)
	attBlock = 3 // several blocks per sequence
	cfg := tinyCfg
	flat := make([]float64, cfg.NumParams())
	initParams(cfg, 7, flat)
	// Larger weights than the init so every layer moves the loss visibly,
	// and non-trivial gains and biases.
	for i := range flat {
		flat[i] = flat[i]*5 + 0.05*math.Sin(float64(i))
	}
	seqs, targets := tinyBatch()
	_, grad := lossAndGrad(cfg, flat, seqs, targets)
	const h = 1e-5
	off := 0
	for _, s := range cfg.layout() {
		t.Run(s.Name, func(t *testing.T) {
			worst := 0.0
			for i := off; i < off+s.size(); i++ {
				orig := flat[i]
				flat[i] = orig + h
				lp := lossOnly(cfg, flat, seqs, targets)
				flat[i] = orig - h
				lm := lossOnly(cfg, flat, seqs, targets)
				flat[i] = orig
				num := (lp - lm) / (2 * h)
				diff := math.Abs(num - grad[i])
				tol := 1e-6 + 1e-4*math.Max(math.Abs(num), math.Abs(grad[i]))
				if diff > tol {
					t.Errorf("%s[%d]: backward %.8g, finite difference %.8g", s.Name, i-off, grad[i], num)
				}
				worst = math.Max(worst, diff)
			}
			t.Logf("%s: %d entries, worst abs diff %.2g", s.Name, s.size(), worst)
		})
		off += s.size()
	}
}

// TestFloat32MatchesFloat64 checks that the float32 model the package
// runs computes the same loss and gradient as the checked float64 path.
func TestFloat32MatchesFloat64(t *testing.T) {
	cfg := Config{Vocab: TokenizerVocab, Layers: 2, DModel: 32, Heads: 4, DFF: 64, Context: 32}
	f64 := make([]float64, cfg.NumParams())
	f32 := make([]float32, cfg.NumParams())
	initParams(cfg, 3, f64)
	initParams(cfg, 3, f32)
	ids, mask, err := Encode(chat("what is 2+2?", "four"), false)
	if err != nil {
		t.Fatal(err)
	}
	tg := make([]int, len(ids))
	for i := range ids {
		tg[i] = -1
		if i+1 < len(ids) && mask[i+1] {
			tg[i] = ids[i+1]
		}
	}
	seqs, targets := [][]int{ids, ids[:10]}, [][]int{tg, tg[:10]}
	l64, g64 := lossAndGrad(cfg, f64, seqs, targets)
	l32, g32 := lossAndGrad(cfg, f32, seqs, targets)
	if math.Abs(l64-l32) > 1e-4*math.Abs(l64) {
		t.Errorf("loss float32 %v, float64 %v", l32, l64)
	}
	var num, den float64
	for i := range g64 {
		d := float64(g32[i]) - g64[i]
		num += d * d
		den += g64[i] * g64[i]
	}
	if rel := math.Sqrt(num / den); rel > 1e-4 {
		t.Errorf("float32 gradient differs from float64 by %.2g (relative L2)", rel)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", DemoConfig(), ""},
		{"heads", Config{Vocab: 10, Layers: 1, DModel: 10, Heads: 3, DFF: 4, Context: 4}, "multiple of heads"},
		{"zero layers", Config{Vocab: 10, DModel: 8, Heads: 2, DFF: 4, Context: 4}, "layers = 0"},
		{"context", Config{Vocab: 10, Layers: 1, DModel: 8, Heads: 2, DFF: 4, Context: 1}, "context = 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
