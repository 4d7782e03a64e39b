package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/internal/progress"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/play"
	"github.com/whalerun/whale/storage"
)

// Name is the stage's name in folders and ledgers.
const Name = "rollout"

// DefaultSamples is G, the samples per task of a weight step (WHALE's 8).
const DefaultSamples = 8

// DefaultConcurrency is the episodes in flight when Stage.Concurrency is 0.
const DefaultConcurrency = 32

// Sampling is the decoding of every model call.
type Sampling = play.Sampling

// Config is what a rollout computes; it is hashed into the stage's
// identity.
type Config struct {
	Domain string `json:"domain"`
	// Harness is "h0" (the domain's baseline) or an archived id
	// "sha256:<hex>". Rows carry the real id either way.
	Harness   string   `json:"harness"`
	ModelName string   `json:"model_name"`
	Sampling  Sampling `json:"sampling"`
	// Samples is G, episodes per task; 0 means DefaultSamples.
	Samples int `json:"samples"`
	// Offset and Limit pick the window of tasks (see the package doc).
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	// Shuffle, when set, is the seed of the per-epoch order the window
	// reads (see the package doc); unset keeps the stored order. A
	// planner gives every window of a run the same seed, so that they
	// agree on each epoch's order.
	Shuffle *int64 `json:"shuffle,omitempty"`
	// Split, when set, keeps only tasks of that split.
	Split string `json:"split,omitempty"`
}

func (c *Config) check(dom episode.Domain) error {
	if dom == nil {
		return errors.New("the stage has no domain")
	}
	if c.Domain != dom.Name() {
		return fmt.Errorf("config.domain is %q but the stage was given domain %q", c.Domain, dom.Name())
	}
	if c.Samples < 0 || c.Limit < 0 {
		return fmt.Errorf("config: samples %d and limit %d must not be negative", c.Samples, c.Limit)
	}
	if c.Samples == 0 {
		c.Samples = DefaultSamples
	}
	return nil
}

// Stage runs rollouts. Its fields are runtime dependencies: they are not
// part of the stage's identity.
type Stage struct {
	Domain episode.Domain
	Model  episode.Chatter
	// Concurrency bounds the episodes in flight; 0 means DefaultConcurrency.
	Concurrency int
	// Progress, when a terminal, shows a progress bar; nil shows none.
	Progress io.Writer
	// Log receives the stage's events; nil means the Exec's logger.
	Log *slog.Logger
	// Archive is the root whose harnesses/ holds archived harnesses; nil
	// allows only the baseline.
	Archive *storage.Store
}

// Name implements stages.Stage.
func (*Stage) Name() string { return Name }

// Run plays this shard's episodes.
func (s *Stage) Run(ctx context.Context, x *stages.Exec) error {
	var cfg Config
	if err := x.DecodeConfig(&cfg); err != nil {
		return err
	}
	if err := cfg.check(s.Domain); err != nil {
		return err
	}
	if err := play.CheckModel(s.Model, cfg.ModelName); err != nil {
		return err
	}
	log := s.Log
	if log == nil {
		log = x.Log
	}
	in, err := x.Input("tasks")
	if err != nil {
		return err
	}
	tasks, err := play.ReadTasks(ctx, x, in, cfg.Domain, cfg.Split, play.Window{Offset: cfg.Offset, Limit: cfg.Limit, Shuffle: cfg.Shuffle})
	if err != nil {
		return err
	}
	file, src, err := play.Source(ctx, s.Archive, s.Domain, cfg.Harness)
	if err != nil {
		return err
	}
	h, err := play.Load(s.Domain, file, src)
	if err != nil {
		return err
	}

	g := cfg.Samples
	total := len(tasks.List) * g
	mine := shardJobs(total, x.Shard, x.Shards)
	log.Info("rollout shard starting", "harness", h.ID(), "tasks", len(tasks.List), "of", tasks.Total,
		"from", tasks.Start, "samples", g, "episodes", mine)

	w, err := play.NewRolloutWriter(ctx, x, "rollouts.parquet", play.Meta(x), play.SectionWeight)
	if err != nil {
		return err
	}
	bar := progress.New(s.Progress, fmt.Sprintf("rollout %s %d/%d", x.Position, x.Shard+1, x.Shards), int64(mine))
	defer bar.Close()

	jobs := func(yield func(episode.Job) bool) {
		for k := x.Shard; k < total; k += x.Shards {
			t := tasks.List[k/g]
			if !yield(episode.Job{Index: k, Task: t, Sample: k % g, Seed: play.Seed(x.Seed, t.ID, k%g)}) {
				return
			}
		}
	}
	ecfg := episode.Config{Sampling: cfg.Sampling.Models()}
	var st play.Stats
	err = episode.RunBatch(ctx, s.concurrency(), iter.Seq[episode.Job](jobs),
		func(ctx context.Context, j episode.Job) episode.Result {
			c := ecfg
			c.Seed = j.Seed
			return episode.Run(ctx, s.Domain, h, s.Model, j.Task, c)
		},
		func(j episode.Job, r episode.Result) error {
			row := r.Row(schemas.Rollout{Run: x.Run, Position: x.Position, HarnessID: h.ID(),
				TaskID: j.Task.ID, Sample: int32(j.Sample), Seed: j.Seed})
			if row.ModelID == "" {
				row.ModelID = cfg.ModelName
			}
			st.Add(&row)
			bar.Add(row.Error != "")
			return w.Write(row)
		})
	if err != nil {
		w.Abort()
		return fmt.Errorf("rollout: %w", err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	if st.Episodes != int64(mine) {
		return fmt.Errorf("rollout: %d rows for %d episodes", st.Episodes, mine)
	}
	log.Info("rollout shard done", "episodes", st.Episodes, "failed", st.Failed, "correct", st.Correct,
		"mean_reward", play.Mean(st.RewardSum, st.Episodes))
	for k, v := range summary(&st, h.ID(), len(tasks.List), g) {
		x.SetSummary(k, v)
	}
	return nil
}

func (s *Stage) concurrency() int {
	if s.Concurrency > 0 {
		return s.Concurrency
	}
	return DefaultConcurrency
}

// shardJobs counts the k in [0, total) with k mod shards == shard.
func shardJobs(total, shard, shards int) int {
	if shard >= total {
		return 0
	}
	return (total-shard-1)/shards + 1
}

func summary(st *play.Stats, harnessID string, tasks, samples int) map[string]any {
	return map[string]any{
		"episodes":          st.Episodes,
		"failed":            st.Failed,
		"correct":           st.Correct,
		"mean_reward":       play.Mean(st.RewardSum, st.Episodes),
		"mean_turns":        play.Mean(st.TurnsSum, st.Episodes),
		"prompt_tokens":     st.PromptTokens,
		"completion_tokens": st.CompletionTokens,
		"model_ids":         st.ModelIDs(),
		"harness_id":        harnessID,
		"tasks":             tasks,
		"samples":           samples,
	}
}

// MergeSummaries implements stages.Merger: counts add up, means are
// weighted by episodes, model ids are united; the harness, the window
// and the samples are the same in every shard.
func (*Stage) MergeSummaries(parts []map[string]any) (map[string]any, error) {
	num := func(p map[string]any, k string) (float64, error) {
		v, ok := p[k].(float64)
		if !ok {
			return 0, fmt.Errorf("rollout summary: %q is %T, want a number", k, p[k])
		}
		return v, nil
	}
	var episodes, failed, correct, reward, turns, ptok, ctok float64
	ids := map[string]bool{}
	out := map[string]any{}
	for i, p := range parts {
		var e [7]float64
		for j, k := range []string{"episodes", "failed", "correct", "mean_reward", "mean_turns", "prompt_tokens", "completion_tokens"} {
			v, err := num(p, k)
			if err != nil {
				return nil, fmt.Errorf("shard %d: %w", i, err)
			}
			e[j] = v
		}
		episodes += e[0]
		failed += e[1]
		correct += e[2]
		reward += e[3] * e[0]
		turns += e[4] * e[0]
		ptok += e[5]
		ctok += e[6]
		list, _ := p["model_ids"].([]any)
		for _, id := range list {
			if s, ok := id.(string); ok {
				ids[s] = true
			}
		}
		for _, k := range []string{"harness_id", "tasks", "samples"} {
			if prev, ok := out[k]; ok && prev != p[k] {
				return nil, fmt.Errorf("rollout summary: shard %d has %s %v, another %v", i, k, p[k], prev)
			}
			out[k] = p[k]
		}
	}
	models := make([]string, 0, len(ids))
	for id := range ids {
		models = append(models, id)
	}
	slices.Sort(models)
	mean := func(sum float64) float64 {
		if episodes == 0 {
			return 0
		}
		return sum / episodes
	}
	out["episodes"], out["failed"], out["correct"] = episodes, failed, correct
	out["mean_reward"], out["mean_turns"] = mean(reward), mean(turns)
	out["prompt_tokens"], out["completion_tokens"] = ptok, ctok
	out["model_ids"] = models
	return out, nil
}

var _ stages.Merger = (*Stage)(nil)
