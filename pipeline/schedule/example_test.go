package schedule_test

import (
	"fmt"

	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
)

// A small WHALE run with the fixed schedule (0.4 epoch, 2 iterations):
// 20 training tasks in batches of 4 are 5 steps per epoch, so a weight
// phase is 2 steps; the budget of 3 steps leaves room for one harness phase.
func ExampleNext() {
	e := spec.Defaults()
	e.Name, e.Domain = "example", "demo"
	e.Switch.Fixed = spec.FixedSwitch{Epochs: 0.4, Iterations: 2}
	e.RSFT.BatchSize, e.RSFT.GroupSize = 4, 2
	e.Harness.SearchSetSize = 8
	e.Budget.WeightSteps = 3
	e.Normalize()
	in := schedule.Inputs{Experiment: &e, TrainSize: 20, TestSize: 5}

	var h schedule.History
	for {
		d, err := schedule.Next(in, h)
		if err != nil {
			fmt.Println(err)
			return
		}
		pos := d.Position
		if pos == "" {
			pos = "-"
		}
		fmt.Printf("%-8s %3d  %s\n", pos, d.Rollouts, d.Reason)
		if d.Kind == schedule.KindDone {
			return
		}
		h = append(h, schedule.Unit{Kind: d.Kind, Phase: d.Phase, Index: d.Index, Rollouts: d.Rollouts,
			MeanReward: 0.5, BestScore: 0.25 * float64(d.Index)})
	}
	// Output:
	// r001-w01   8  start weight phase r001
	// r001-w02   8  fixed: weight step 2 of 2
	// r001-wt   40  end of weight phase r001: fixed: 2 of 2 weight steps done; test its outgoing pair
	// r001-h01   8  start harness phase r001 after weight phase r001: fixed: 2 of 2 weight steps done
	// r001-h02  24  fixed: harness iteration 2 of 2
	// r001-ht   40  end of harness phase r001: fixed: 2 of 2 harness iterations done; test its outgoing pair
	// r002-w01   8  start weight phase r002 after harness phase r001: fixed: 2 of 2 harness iterations done
	// r002-wt   40  end of weight phase r002: weight budget: 3 of 3 steps done; test its outgoing pair
	// -          0  done: weight budget: 3 of 3 steps done; no harness phase after the last weight phase (no weight step left)
}
