package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"demo", DemoConfig()},
	{"L4-d64", Config{Vocab: TokenizerVocab, Layers: 4, DModel: 64, Heads: 4, DFF: 256, Context: 256}},
	{"L3-d128", Config{Vocab: TokenizerVocab, Layers: 3, DModel: 128, Heads: 4, DFF: 512, Context: 256}},
	{"L4-d128", Config{Vocab: TokenizerVocab, Layers: 4, DModel: 128, Heads: 4, DFF: 512, Context: 256}},
}

func benchBatch(cfg Config, rows, n int, seed uint64) []Example {
	rng := rand.New(rand.NewPCG(seed, 0))
	batch := make([]Example, rows)
	for i := range batch {
		ex := Example{Tokens: make([]int, n), Mask: make([]bool, n)}
		for t := range ex.Tokens {
			ex.Tokens[t] = 32 + rng.IntN(95)
			ex.Mask[t] = t > n/4 // a prompt, then the assistant's part
		}
		batch[i] = ex
	}
	return batch
}

// BenchmarkTrain reports trained (masked) tokens/s and all processed
// tokens/s for batches of 16 full-context sequences.
func BenchmarkTrain(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(bc.cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			batch := benchBatch(bc.cfg, 16, bc.cfg.Context, 1)
			ctx := context.Background()
			opts := TrainOptions{LR: 1e-3, WeightDecay: 0.1, ClipNorm: 1}
			if _, err := m.TrainStep(ctx, batch, opts); err != nil {
				b.Fatal(err)
			}
			var trained, rows int
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for b.Loop() {
				st, err := m.TrainStep(ctx, batch, opts)
				if err != nil {
					b.Fatal(err)
				}
				trained += st.Tokens
				rows += st.Rows
			}
			sec, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
			b.ReportMetric(float64(trained)/sec, "trained-tok/s")
			b.ReportMetric(float64(rows)/sec, "tok/s")
			b.ReportMetric(float64(rows)/cpu, "tok/cpu-s")
			flops := 3 * bc.cfg.FLOPsPerToken(bc.cfg.Context/2)
			b.ReportMetric(float64(rows)*flops/cpu/1e9, "GFLOP/cpu-s")
		})
	}
}

// BenchmarkSample reports generated tokens/s for 64 prompts of 32 tokens
// continued by 128 tokens each (end tokens suppressed so every row runs
// to the limit).
func BenchmarkSample(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(bc.cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			m.p.outb[TokEnd], m.p.outb[TokEOS] = -100, -100
			prompts := make([][]int, 64)
			for i, ex := range benchBatch(bc.cfg, len(prompts), 32, 2) {
				prompts[i] = ex.Tokens
			}
			opts := SampleOptions{MaxNewTokens: 128, Temperature: 1, TopK: 40, Seed: 1}
			ctx := context.Background()
			var toks, promptToks int
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for b.Loop() {
				gens, err := m.Generate(ctx, prompts, opts)
				if err != nil {
					b.Fatal(err)
				}
				for _, g := range gens {
					toks += g.CompletionTokens
					promptToks += g.PromptTokens
				}
			}
			sec, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
			b.ReportMetric(float64(toks)/sec, "sampled-tok/s")
			b.ReportMetric(float64(toks)/cpu, "tok/cpu-s")
			flops := bc.cfg.FLOPsPerToken(32+64)*float64(toks) + bc.cfg.FLOPsPerToken(16)*float64(promptToks)
			b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
		})
	}
}

// BenchmarkGEMM measures one core's float32 matrix multiply on the
// training's common shapes, with the package's kernel and with gonum's
// Sgemm: the yardstick for the GFLOP/cpu-s of Train and Sample.
func BenchmarkGEMM(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, s := range [][3]int{{2048, 128, 512}, {2048, 512, 128}, {2048, 128, 128}, {64, 128, 384}} {
		m, k, n := s[0], s[1], s[2]
		for _, impl := range []string{"kernel", "gonum"} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", impl, m, k, n), func(b *testing.B) {
				if impl == "kernel" && !hasKernel {
					b.Skip("no AVX2/FMA kernel on this CPU")
				}
				a, w, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
				for i := range a {
					a[i] = float32(i%7) * 0.1
				}
				for i := range w {
					w[i] = float32(i%5) * 0.1
				}
				start, cpu0 := time.Now(), cpuSeconds()
				iters := 0
				for b.Loop() {
					if impl == "kernel" {
						sgemm(false, false, m, n, k, 1, a, k, w, n, 0, c, n)
					} else {
						gonumSgemm(m, n, k, a, w, c)
					}
					iters++
				}
				work := float64(iters) * 2 * float64(m*n*k) / 1e9
				b.ReportMetric(work/time.Since(start).Seconds(), "GFLOP/s")
				b.ReportMetric(work/(cpuSeconds()-cpu0), "GFLOP/cpu-s")
			})
		}
	}
}

func gonumSgemm(m, n, k int, a, w, c []float32) {
	impl.Sgemm(tr(false), tr(false), m, n, k, 1, a, k, w, n, 0, c, n)
}
