package filter

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Summary is what the stage records in its manifest. Counts add up across
// shards; the rates are recomputed from them (see MergeSummaries).
type Summary struct {
	Episodes int64 `json:"episodes"`
	Accepted int64 `json:"accepted"`
	// AcceptanceRate is Accepted / Episodes (0 with no episodes).
	AcceptanceRate float64 `json:"acceptance_rate"`
	// Failed counts episodes with an error; they are never accepted.
	Failed int64 `json:"failed"`
	// MeanReward is over every episode, failed ones included with the reward
	// their rows carry: the weight step's mean training reward.
	MeanReward float64 `json:"mean_reward"`
	RewardSum  float64 `json:"reward_sum"`
	// AcceptedTokens sums the completion tokens of accepted episodes.
	AcceptedTokens int64 `json:"accepted_tokens"`
	Tasks          int64 `json:"tasks"`
	TasksAccepted  int64 `json:"tasks_accepted"` // tasks with at least one accepted episode
	Examples       int64 `json:"examples"`       // rows of the sft table
	EmptyExamples  int64 `json:"empty_examples"` // dropped: no assistant message to train on
}

func (s *Summary) rates() {
	s.AcceptanceRate, s.MeanReward = 0, 0
	if s.Episodes > 0 {
		s.AcceptanceRate = float64(s.Accepted) / float64(s.Episodes)
		s.MeanReward = s.RewardSum / float64(s.Episodes)
	}
}

// fields is s as the manifest stores it, numbers as float64 like a
// decoded manifest has them.
func (s Summary) fields() (map[string]any, error) {
	if math.IsNaN(s.RewardSum) || math.IsInf(s.RewardSum, 0) {
		return nil, fmt.Errorf("filter summary: reward sum %v is not a finite number", s.RewardSum)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("filter summary: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("filter summary: %w", err)
	}
	return m, nil
}

// ParseSummary reads a filter manifest's summary (as storage decoded it).
func ParseSummary(m map[string]any) (Summary, error) {
	var s Summary
	b, err := json.Marshal(m)
	if err != nil {
		return s, fmt.Errorf("filter summary: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("filter summary: %w", err)
	}
	for _, k := range []string{"episodes", "accepted", "reward_sum", "tasks"} {
		if _, ok := m[k]; !ok {
			return s, fmt.Errorf("filter summary: no %q (keys: %v)", k, slices.Sorted(maps.Keys(m)))
		}
	}
	return s, nil
}

// MergeSummaries implements stages.Merger: shards hold disjoint tasks, so
// counts add up, and the rates are recomputed from the sums rather than
// averaged.
func (Stage) MergeSummaries(parts []map[string]any) (map[string]any, error) {
	var t Summary
	for i, p := range parts {
		s, err := ParseSummary(p)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		t.Episodes += s.Episodes
		t.Accepted += s.Accepted
		t.Failed += s.Failed
		t.RewardSum += s.RewardSum
		t.AcceptedTokens += s.AcceptedTokens
		t.Tasks += s.Tasks
		t.TasksAccepted += s.TasksAccepted
		t.Examples += s.Examples
		t.EmptyExamples += s.EmptyExamples
	}
	t.rates()
	return t.fields()
}
