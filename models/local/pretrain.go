package local

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// PretrainOptions configure Pretrain. Every field but Log, LogEvery and
// Every is required: each world (domains/demo, domains/searchdemo) keeps
// the defaults of its committed checkpoint.
type PretrainOptions struct {
	Seed  uint64
	Steps int
	Batch int // conversations per step
	// LR is the learning rate after a linear warm-up; it stays constant so
	// that the model after k steps of a longer run is Pretrain with k steps.
	LR     float64
	Warmup int
	// Log, when set, gets progress every LogEvery steps and at the end.
	Log      *slog.Logger
	LogEvery int
	// Every, when set, is called after every LogEvery steps (for probes).
	Every func(ctx context.Context, step int, m *Model) error
}

// Or returns o with every zero field of Seed, Steps, Batch, LR, Warmup and
// LogEvery taken from d (a world's defaults).
func (o PretrainOptions) Or(d PretrainOptions) PretrainOptions {
	o.Seed, o.Steps, o.Batch = cmp.Or(o.Seed, d.Seed), cmp.Or(o.Steps, d.Steps), cmp.Or(o.Batch, d.Batch)
	o.LR, o.Warmup, o.LogEvery = cmp.Or(o.LR, d.LR), cmp.Or(o.Warmup, d.Warmup), cmp.Or(o.LogEvery, d.LogEvery)
	return o
}

// Draw makes one pretraining example from the data stream rng. ok false
// skips it (the next draw continues the same stream), so that a world can
// drop an example that would not fit without changing the ones after it.
type Draw func(rng *rand.Rand) (ex Example, ok bool, err error)

// pretrainStream is the PCG stream of the data, next to the seed.
const pretrainStream = 0xda7a

// Pretrain makes a model of cfg from scratch: New(cfg, Seed), then Steps
// AdamW steps (weight decay 0.01, gradient clipping at norm 1) over
// batches of Batch examples that draw makes from one PCG stream fixed by
// Seed. The same options, draw and GOMAXPROCS give the same weights bit
// for bit: the data, the initialisation and the gradient groups are all
// fixed by them.
func Pretrain(ctx context.Context, cfg Config, o PretrainOptions, draw Draw) (*Model, error) {
	if o.Steps < 1 || o.Batch < 1 || o.LR <= 0 || o.Warmup < 0 {
		return nil, fmt.Errorf("pretrain: steps %d, batch %d, lr %g, warm-up %d: want steps, batch and lr > 0, warm-up ≥ 0", o.Steps, o.Batch, o.LR, o.Warmup)
	}
	if o.LogEvery <= 0 {
		o.LogEvery = 100
	}
	m, err := New(cfg, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, pretrainStream))
	start := time.Now()
	var lossSum float64
	var lossN int
	for step := range o.Steps {
		batch := make([]Example, 0, o.Batch)
		for len(batch) < o.Batch {
			ex, ok, err := draw(rng)
			if err != nil {
				return nil, fmt.Errorf("pretrain step %d: %w", step+1, err)
			}
			if ok {
				batch = append(batch, ex)
			}
		}
		lr := o.LR
		if step < o.Warmup {
			lr = o.LR * float64(step+1) / float64(o.Warmup)
		}
		st, err := m.TrainStep(ctx, batch, TrainOptions{LR: lr, WeightDecay: 0.01, ClipNorm: 1})
		if err != nil {
			return nil, fmt.Errorf("pretrain: %w", err)
		}
		lossSum += st.Loss
		lossN++
		if o.Log != nil && ((step+1)%o.LogEvery == 0 || step+1 == o.Steps) {
			o.Log.Info("pretrain", "step", step+1, "of", o.Steps, "loss", lossSum/float64(lossN), "elapsed", time.Since(start).Round(time.Second))
			lossSum, lossN = 0, 0
		}
		if o.Every != nil && (step+1)%o.LogEvery == 0 {
			if err := o.Every(ctx, step+1, m); err != nil {
				return nil, fmt.Errorf("pretrain step %d: %w", step+1, err)
			}
		}
	}
	return m, nil
}
