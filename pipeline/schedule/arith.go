package schedule

import (
	"math"

	"github.com/whalerun/whale/pipeline/spec"
)

// StepsPerEpoch is the number of weight steps that cover trainSize tasks
// once: ceil(trainSize / batchSize). It is 0 when either size is below 1.
func StepsPerEpoch(trainSize, batchSize int) int {
	if trainSize < 1 || batchSize < 1 {
		return 0
	}
	return (trainSize + batchSize - 1) / batchSize
}

// EpochsToSteps converts a length in epochs to weight steps:
// max(1, round(epochs × stepsPerEpoch)), rounding half away from zero.
// Every length the planner takes in epochs (a fixed phase, the patience
// window, burn-in and patience, budget.epochs) goes through it, so a short
// length never rounds to a phase that cannot run.
func EpochsToSteps(epochs float64, stepsPerEpoch int) int {
	n := math.Round(epochs * float64(stepsPerEpoch))
	if math.IsNaN(n) || n < 1 {
		return 1
	}
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

// WeightStepRollouts is the target-model rollouts one weight step costs:
// rsft.batch_size prompts × rsft.group_size samples.
func WeightStepRollouts(e *spec.Experiment) int64 {
	return int64(e.RSFT.BatchSize) * int64(e.RSFT.GroupSize)
}

// HarnessIterationRollouts is the target-model rollouts harness iteration
// index (1-based, within its phase) costs on a search set of searchSize
// examples: the first iteration scores only the incoming harness
// (searchSize × samples_per_candidate); every later one scores
// candidates_per_iteration new candidates.
func HarnessIterationRollouts(e *spec.Experiment, searchSize, index int) int64 {
	perCandidate := int64(searchSize) * int64(e.Harness.SamplesPerCandidate)
	if index <= 1 {
		return perCandidate
	}
	return int64(e.Harness.CandidatesPerIteration) * perCandidate
}

// HarnessPhaseRollouts is the cost of a harness phase of n iterations.
func HarnessPhaseRollouts(e *spec.Experiment, searchSize, n int) int64 {
	if n < 1 {
		return 0
	}
	return HarnessIterationRollouts(e, searchSize, 1) + int64(n-1)*HarnessIterationRollouts(e, searchSize, 2)
}

// TestRollouts is the rollouts of one test evaluation: testSize × k. They
// are reported apart and never count toward budget.rollouts.
func TestRollouts(testSize, k int) int64 {
	return int64(testSize) * int64(k)
}
