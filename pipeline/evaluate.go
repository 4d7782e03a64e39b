package pipeline

import (
	"fmt"

	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/storage"
)

// fillEvaluate sets an evaluate stage's inputs and config: the incoming
// harness on the search set (first iteration of a harness phase), the
// proposed candidates on the search set (later iterations), or the pair in
// force on the test split (a test unit).
func (pl *Planner) fillEvaluate(p *Plan, spc *stages.Spec, pos schedule.Pos, here map[string]*storage.Manifest,
	harness string, dataset func(field, ref string) (stages.InputRef, error)) error {
	e := pl.Spec
	cfg := evaluate.Config{
		Domain:    e.Domain,
		ModelName: p.Model,
		Sampling:  sampling(e.Model),
	}
	var in stages.InputRef
	var err error
	switch p.Decision.Kind {
	case schedule.KindTest:
		in, err = dataset("data.test", e.Data.Test)
		cfg.Mode = evaluate.ModeTest
		cfg.Samples = e.Eval.K
		cfg.Harnesses = []string{harness}
	case schedule.KindHarness:
		in, err = dataset("data.search", e.Data.Search)
		cfg.Mode = evaluate.ModeSearch
		cfg.Samples = e.Harness.SamplesPerCandidate
		cfg.Limit = e.Harness.SearchSetSize
		if pos.Index <= 1 {
			cfg.Harnesses = []string{harness}
		} else {
			prop := here[StagePropose]
			if prop == nil {
				return fmt.Errorf("evaluate at %s needs the propose stage at %s, which is not committed", pos, pos)
			}
			spc.Inputs = append(spc.Inputs, stages.InputRef{Name: "candidates", Key: prop.Dir})
		}
	default:
		return fmt.Errorf("evaluate at %s: a %s unit has no evaluation", pos, p.Decision.Kind)
	}
	if err != nil {
		return err
	}
	spc.Inputs = append([]stages.InputRef{in}, spc.Inputs...)
	spc.Config = cfg
	return nil
}

func (r *Runner) evaluateImpl() stages.Stage {
	return &evaluate.Stage{Domain: r.Runtime.Domain, Model: r.Runtime.Model, Concurrency: r.Spec.Rollout.Concurrency,
		Progress: r.Out, Log: r.Log, Archive: r.Store}
}

// evalPoints reads the candidates an evaluate stage scored, in its order.
func evalPoints(m *storage.Manifest) ([]metrics.Point, error) {
	f, err := evaluate.DecodeSummary(m.Summary)
	if err != nil {
		return nil, fmt.Errorf("evaluate stage %s: %w", m.Dir, err)
	}
	out := make([]metrics.Point, 0, len(f.Candidates))
	for _, c := range f.Candidates {
		out = append(out, metrics.Point{ID: c.HarnessID, Success: c.Success, Turns: c.MeanTurns})
	}
	return out, nil
}
