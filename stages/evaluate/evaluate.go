package evaluate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"slices"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/internal/progress"
	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/play"
	"github.com/whalerun/whale/storage"
)

// Name is the stage's name in folders and ledgers.
const Name = "evaluate"

// Modes of an evaluation.
const (
	ModeSearch = "search" // candidates on the search set, 1 sample each by default
	ModeTest   = "test"   // a (model, harness) pair on a test split, k = 8 by default
)

// Default samples per (candidate, task) of each mode.
const (
	DefaultSearchSamples = 1
	DefaultTestSamples   = 8
)

// DefaultConcurrency is the episodes in flight when Stage.Concurrency is 0.
const DefaultConcurrency = 32

// Sampling is the decoding of every model call.
type Sampling = play.Sampling

// Config is what an evaluation computes; it is hashed into the stage's
// identity.
type Config struct {
	Domain string `json:"domain"`
	// Harnesses are "h0" or archived ids, scored when the stage has no
	// "candidates" input.
	Harnesses []string `json:"harnesses,omitempty"`
	ModelName string   `json:"model_name"`
	Sampling  Sampling `json:"sampling"`
	// Samples is k per (candidate, task); 0 means the mode's default.
	Samples int `json:"samples"`
	// Limit keeps the first Limit tasks; 0 means all.
	Limit int `json:"limit"`
	// Mode is ModeSearch or ModeTest.
	Mode string `json:"mode"`
	// Split, when set, keeps only tasks of that split.
	Split string `json:"split,omitempty"`
}

// section is what the rows of an evaluation in mode are, for a stage
// that was not told its place: a harness iteration's search, or a test.
func section(mode string) string {
	if mode == ModeTest {
		return play.SectionTest
	}
	return play.SectionHarness
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
	switch c.Mode {
	case ModeSearch:
		if c.Samples == 0 {
			c.Samples = DefaultSearchSamples
		}
	case ModeTest:
		if c.Samples == 0 {
			c.Samples = DefaultTestSamples
		}
	default:
		return fmt.Errorf("config.mode is %q: want %q or %q", c.Mode, ModeSearch, ModeTest)
	}
	return nil
}

// Stage runs evaluations. Its fields are runtime dependencies: they are
// not part of the stage's identity.
type Stage struct {
	Domain episode.Domain
	Model  episode.Chatter
	// Concurrency bounds the episodes in flight; 0 means DefaultConcurrency.
	Concurrency int
	// Progress, when a terminal, shows a progress bar; nil shows none.
	Progress io.Writer
	// Log receives the stage's events; nil means the Exec's logger.
	Log *slog.Logger
	// Archive is the root whose harnesses/ holds archived harnesses: where
	// Config.Harnesses are read from and candidates are stored. Nil allows
	// only h0 and a candidates input, and stores nothing.
	Archive *storage.Store
}

// Name implements stages.Stage.
func (*Stage) Name() string { return Name }

// candidate is one harness under evaluation.
type candidate struct {
	id, name, parent string
	h                *harness.Harness
}

// Run plays this shard's episodes and writes its rollouts and evals.
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
	tasks, err := play.ReadTasks(ctx, x, in, cfg.Domain, cfg.Split, play.Window{Limit: cfg.Limit})
	if err != nil {
		return err
	}
	cands, err := s.candidates(ctx, x, &cfg)
	if err != nil {
		return err
	}

	var mine []schemas.Task // task i of the list goes to shard i mod n
	for i := x.Shard; i < len(tasks.List); i += x.Shards {
		mine = append(mine, tasks.List[i])
	}
	k := cfg.Samples
	perCand := len(mine) * k
	log.Info("evaluate shard starting", "mode", cfg.Mode, "candidates", len(cands), "tasks", len(mine),
		"of", len(tasks.List), "k", k, "episodes", perCand*len(cands))

	w, err := play.NewRolloutWriter(ctx, x, "rollouts.parquet", play.Meta(x), section(cfg.Mode))
	if err != nil {
		return err
	}
	bar := progress.New(s.Progress, fmt.Sprintf("evaluate %s %d/%d", x.Position, x.Shard+1, x.Shards), int64(perCand*len(cands)))
	defer bar.Close()

	jobs := func(yield func(episode.Job) bool) {
		for c := range cands {
			for j, t := range mine {
				for smp := range k {
					if !yield(episode.Job{Index: c*perCand + j*k + smp, Task: t, Sample: smp, Seed: play.Seed(x.Seed, t.ID, smp)}) {
						return
					}
				}
			}
		}
	}
	ecfg := episode.Config{Sampling: cfg.Sampling.Models()}
	evals := metrics.NewAccumulator(k)  // per model id the server reported
	scores := metrics.NewAccumulator(k) // per candidate, whatever model answered
	var st play.Stats
	err = episode.RunBatch(ctx, s.concurrency(), iter.Seq[episode.Job](jobs),
		func(ctx context.Context, j episode.Job) episode.Result {
			c := ecfg
			c.Seed = j.Seed
			return episode.Run(ctx, s.Domain, cands[j.Index/perCand].h, s.Model, j.Task, c)
		},
		func(j episode.Job, r episode.Result) error {
			row := r.Row(schemas.Rollout{Run: x.Run, Position: x.Position, HarnessID: cands[j.Index/perCand].id,
				TaskID: j.Task.ID, Sample: int32(j.Sample), Seed: j.Seed})
			if row.ModelID == "" {
				row.ModelID = cfg.ModelName
			}
			st.Add(&row)
			bar.Add(row.Error != "")
			evals.Add(row)
			anyModel := row
			anyModel.ModelID = ""
			anyModel.Messages, anyModel.Trace = nil, nil
			scores.Add(anyModel)
			return w.Write(row)
		})
	if err != nil {
		w.Abort()
		return fmt.Errorf("evaluate: %w", err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := writeEvals(ctx, x, evals.Evals()); err != nil {
		return err
	}

	byID := map[string]metrics.Summary{}
	for _, sm := range scores.Summaries() {
		byID[sm.HarnessID] = sm
	}
	f := Frontier{Mode: cfg.Mode, K: k, Tasks: len(mine), ModelName: cfg.ModelName, ModelIDs: st.ModelIDs(),
		Episodes: int(st.Episodes), Failed: int(st.Failed)}
	for _, c := range cands {
		sc := Score{HarnessID: c.id, Name: c.name, ParentID: c.parent}
		if sm, ok := byID[c.id]; ok {
			sc.Tasks, sc.Episodes, sc.Failed = sm.Tasks, sm.Episodes, sm.Failed
			sc.Success, sc.PassAtK, sc.MeanTurns, sc.MeanTokens = sm.MeanAtK, sm.PassAtK, sm.MeanTurns, sm.MeanTokens
		}
		f.Candidates = append(f.Candidates, sc)
	}
	f.mark()
	if x.Shards == 1 {
		if err := writeJSON(ctx, x, "frontier.json", f, len(f.Candidates)); err != nil {
			return err
		}
	}
	for key, v := range f.summary() {
		x.SetSummary(key, v)
	}
	log.Info("evaluate shard done", "episodes", st.Episodes, "failed", st.Failed, "winner", f.Winner, "best_score", f.BestScore)
	return nil
}

// candidates loads what the stage scores: the candidates input, or the
// config's harnesses.
func (s *Stage) candidates(ctx context.Context, x *stages.Exec, cfg *Config) ([]candidate, error) {
	var out []candidate
	seen := map[string]string{}
	// add loads c; where names it for errors (the caller's wrapping adds
	// what where leaves out), seenAt names it for a later duplicate.
	add := func(c candidate, src []byte, filename, where, seenAt string) error {
		if prev, dup := seen[c.id]; dup {
			return fmt.Errorf("%s: harness %s is listed twice (first at %s)", where, c.id, prev)
		}
		seen[c.id] = seenAt
		h, err := play.Load(s.Domain, filename, src)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		c.h = h
		if s.Archive != nil {
			if _, err := archive.Put(ctx, s.Archive, src); err != nil {
				return err
			}
		}
		out = append(out, c)
		return nil
	}
	in := x.Inputs["candidates"]
	if in == nil {
		if len(cfg.Harnesses) == 0 {
			return nil, errors.New(`nothing to evaluate: no "candidates" input and no config.harnesses`)
		}
		for i, ref := range cfg.Harnesses {
			file, src, err := play.Source(ctx, s.Archive, s.Domain, ref)
			if err != nil {
				return nil, fmt.Errorf("config.harnesses[%d]: %w", i, err)
			}
			id := harness.SourceID(src)
			name := ref
			if ref != play.Baseline {
				name = id[:len("sha256:")+12]
			}
			where := fmt.Sprintf("config.harnesses[%d]", i)
			if err := add(candidate{id: id, name: name}, src, file, where, where); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if len(cfg.Harnesses) > 0 {
		return nil, fmt.Errorf(`config.harnesses and a "candidates" input (%s) exclude each other`, in.Dir)
	}
	for _, f := range in.Table("candidates") {
		key := in.FileKey(f)
		ra, err := x.Open(ctx, in, f)
		if err != nil {
			return nil, fmt.Errorf("read candidates %s: %w", key, err)
		}
		row := 0
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(c schemas.Candidate) error {
			row++
			where := fmt.Sprintf("row %d", row)
			src := []byte(c.Source)
			if got := harness.SourceID(src); got != c.HarnessID {
				return fmt.Errorf("%s: candidate %q says harness_id %s, but its source hashes to %s", where, c.Name, c.HarnessID, got)
			}
			file, _ := archive.Key(c.HarnessID)
			return add(candidate{id: c.HarnessID, name: c.Name, parent: c.ParentID}, src, file, where, key+" "+where)
		})
		if err != nil {
			return nil, fmt.Errorf("read candidates %s: %w", key, err)
		}
	}
	// A proposer that found nothing valid leaves an empty table: the
	// iteration then scores nothing and costs no rollouts, and the phase's
	// archive keeps its best (the planner counts the iteration).
	return out, nil
}

func (s *Stage) concurrency() int {
	if s.Concurrency > 0 {
		return s.Concurrency
	}
	return DefaultConcurrency
}

func writeEvals(ctx context.Context, x *stages.Exec, rows []schemas.Eval) error {
	pw, err := x.Create(ctx, "evals.parquet")
	if err != nil {
		return err
	}
	w, err := schemas.NewWriter[schemas.Eval](pw, schemas.Evals, schemas.WriterOptions{Metadata: play.Meta(x)})
	if err == nil {
		err = w.Write(rows...)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		pw.Abort()
		return fmt.Errorf("write %s: %w", pw.Key(), err)
	}
	if _, err := pw.Finish(int64(len(rows))); err != nil {
		return fmt.Errorf("upload %s: %w", pw.Key(), err)
	}
	return nil
}

func writeJSON(ctx context.Context, x *stages.Exec, file string, v any, rows int) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", file, err)
	}
	pw, err := x.Create(ctx, file)
	if err != nil {
		return err
	}
	if _, err := pw.Write(append(data, '\n')); err != nil {
		pw.Abort()
		return fmt.Errorf("write %s: %w", pw.Key(), err)
	}
	if _, err := pw.Finish(int64(rows)); err != nil {
		return fmt.Errorf("upload %s: %w", pw.Key(), err)
	}
	return nil
}

// Score is one candidate's result.
type Score struct {
	HarnessID string `json:"harness_id"`
	Name      string `json:"name"`
	ParentID  string `json:"parent_id,omitempty"`
	// Tasks, Episodes and Failed count what was scored.
	Tasks    int `json:"tasks"`
	Episodes int `json:"episodes"`
	Failed   int `json:"failed"`
	// Success is mean@k: the mean over tasks of each task's mean reward.
	Success    float64 `json:"success"`
	PassAtK    float64 `json:"pass_at_k"`
	MeanTurns  float64 `json:"mean_turns"`
	MeanTokens float64 `json:"mean_tokens"`
	OnFrontier bool    `json:"on_frontier"`
	Winner     bool    `json:"winner"`
}

// Frontier is an evaluation's result: every candidate's score, which of
// them are on the Pareto frontier, and the winner by WHALE's rule (top
// success, then fewer turns, then earlier in Candidates).
type Frontier struct {
	Mode       string   `json:"mode"`
	K          int      `json:"k"`
	Tasks      int      `json:"tasks"`
	Episodes   int      `json:"episodes"`
	Failed     int      `json:"failed"`
	ModelName  string   `json:"model_name"`
	ModelIDs   []string `json:"model_ids"`
	Candidates []Score  `json:"candidates"`
	// Winner is the winner's harness id; empty when nothing was scored.
	Winner      string  `json:"winner"`
	WinnerName  string  `json:"winner_name"`
	WinnerTurns float64 `json:"winner_turns"`
	BestScore   float64 `json:"best_score"`
	// Perfect: some candidate scored 1.0 (the harness phase may stop).
	Perfect bool `json:"perfect"`
}

// mark sets the frontier flags and the winner from the scores.
func (f *Frontier) mark() {
	pts := make([]metrics.Point, len(f.Candidates))
	for i, c := range f.Candidates {
		p := metrics.Point{ID: c.HarnessID, Success: c.Success, Turns: c.MeanTurns}
		if c.Tasks == 0 {
			p.Success, p.Turns = math.NaN(), math.NaN()
		}
		pts[i] = p
	}
	on := map[string]bool{}
	for _, p := range metrics.Frontier(pts) {
		on[p.ID] = true
	}
	f.Winner, f.WinnerName, f.WinnerTurns, f.BestScore, f.Perfect = "", "", 0, 0, false
	_, wi, ok := metrics.Winner(pts)
	for i := range f.Candidates {
		c := &f.Candidates[i]
		c.OnFrontier = on[c.HarnessID]
		c.Winner = ok && i == wi
		if c.Tasks > 0 && c.Success >= 1 {
			f.Perfect = true
		}
	}
	if ok {
		w := f.Candidates[wi]
		f.Winner, f.WinnerName, f.WinnerTurns, f.BestScore = w.HarnessID, w.Name, w.MeanTurns, w.Success
	}
}

func (f *Frontier) summary() map[string]any {
	var m map[string]any
	data, _ := json.Marshal(f)
	_ = json.Unmarshal(data, &m)
	return m
}

// DecodeSummary reads an evaluate stage's committed summary as a Frontier.
func DecodeSummary(summary map[string]any) (*Frontier, error) {
	data, err := json.Marshal(summary)
	if err != nil {
		return nil, fmt.Errorf("evaluate summary: %w", err)
	}
	var f Frontier
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("evaluate summary: %w", err)
	}
	return &f, nil
}

// MergeSummaries implements stages.Merger: the shards' per-candidate
// scores are combined weighted by their task counts (each task lies in one
// shard), and the frontier and the winner are computed over the whole.
func (*Stage) MergeSummaries(parts []map[string]any) (map[string]any, error) {
	var out *Frontier
	ids := map[string]bool{}
	for i, p := range parts {
		f, err := DecodeSummary(p)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		for _, id := range f.ModelIDs {
			ids[id] = true
		}
		if out == nil {
			out = f
			for j := range out.Candidates {
				c := &out.Candidates[j]
				t := float64(c.Tasks)
				c.Success, c.PassAtK, c.MeanTurns, c.MeanTokens = c.Success*t, c.PassAtK*t, c.MeanTurns*t, c.MeanTokens*t
			}
			continue
		}
		if f.Mode != out.Mode || f.K != out.K || len(f.Candidates) != len(out.Candidates) {
			return nil, fmt.Errorf("shard %d evaluated mode %s, k %d, %d candidates; shard 0 mode %s, k %d, %d candidates",
				i, f.Mode, f.K, len(f.Candidates), out.Mode, out.K, len(out.Candidates))
		}
		out.Tasks += f.Tasks
		out.Episodes += f.Episodes
		out.Failed += f.Failed
		for j, c := range f.Candidates {
			o := &out.Candidates[j]
			if c.HarnessID != o.HarnessID {
				return nil, fmt.Errorf("shard %d lists candidate %d as %s, shard 0 as %s", i, j, c.HarnessID, o.HarnessID)
			}
			t := float64(c.Tasks)
			o.Tasks += c.Tasks
			o.Episodes += c.Episodes
			o.Failed += c.Failed
			o.Success += c.Success * t
			o.PassAtK += c.PassAtK * t
			o.MeanTurns += c.MeanTurns * t
			o.MeanTokens += c.MeanTokens * t
		}
	}
	if out == nil {
		return nil, errors.New("evaluate summary: no shards")
	}
	for j := range out.Candidates {
		c := &out.Candidates[j]
		if c.Tasks > 0 {
			t := float64(c.Tasks)
			c.Success, c.PassAtK, c.MeanTurns, c.MeanTokens = c.Success/t, c.PassAtK/t, c.MeanTurns/t, c.MeanTokens/t
		}
	}
	out.ModelIDs = make([]string, 0, len(ids))
	for id := range ids {
		out.ModelIDs = append(out.ModelIDs, id)
	}
	slices.Sort(out.ModelIDs)
	out.mark()
	return out.summary(), nil
}

var _ stages.Merger = (*Stage)(nil)
