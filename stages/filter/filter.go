package filter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Name is the stage's name in folder names and specs.
const Name = "filter"

// Input is the name the stage reads its rollouts under.
const Input = "rollouts"

// Trace event kinds the stage reads.
const (
	KindModel   = "model"   // one model call
	KindContext = "context" // the exact messages sent for the call of the same turn
)

// DefaultThreshold is WHALE's acceptance threshold: with a binary verifier,
// only correct episodes pass.
const DefaultThreshold = 0.5

// Config is the stage's configuration, hashed into its identity.
type Config struct {
	// Threshold: an episode is accepted when its reward is strictly above.
	Threshold float64 `json:"threshold"`
}

// DefaultConfig is the configuration with every default filled in.
func DefaultConfig() Config { return Config{Threshold: DefaultThreshold} }

// Stage is the filter stage. The zero value is ready to use.
type Stage struct {
	// Writer tunes the sft Parquet writer (row-group bounds); zero is fine.
	Writer schemas.WriterOptions
}

var (
	_ stages.Stage  = Stage{}
	_ stages.Merger = Stage{}
)

// Name implements stages.Stage.
func (Stage) Name() string { return Name }

// decodeConfig fills the defaults for keys the config leaves out and
// refuses keys it does not know: a misspelt "treshold" would otherwise
// silently train on the default.
func decodeConfig(x *stages.Exec) (Config, error) {
	cfg := DefaultConfig()
	var raw map[string]json.RawMessage
	if err := x.DecodeConfig(&raw); err != nil {
		return cfg, err
	}
	for k := range raw {
		if k != "threshold" {
			return cfg, fmt.Errorf("stage %s: unknown config key %q (known: threshold)", Name, k)
		}
	}
	if err := x.DecodeConfig(&cfg); err != nil {
		return cfg, err
	}
	if math.IsNaN(cfg.Threshold) || math.IsInf(cfg.Threshold, 0) {
		return cfg, fmt.Errorf("stage %s: config threshold %v is not a finite number", Name, cfg.Threshold)
	}
	return cfg, nil
}

// Run implements stages.Stage.
func (st Stage) Run(ctx context.Context, x *stages.Exec) error {
	cfg, err := decodeConfig(x)
	if err != nil {
		return err
	}
	in, err := x.Input(Input)
	if err != nil {
		return err
	}
	files := in.Table("rollouts")
	if len(files) == 0 && len(in.Files) > 0 {
		return fmt.Errorf("stage %s: input %q (%s) has no rollouts table; its files are of tables %s",
			Name, Input, in.Key, strings.Join(tablesOf(in), ", "))
	}

	pw, err := x.Create(ctx, "sft.parquet")
	if err != nil {
		return err
	}
	defer pw.Abort()
	opts := st.Writer
	opts.Metadata = map[string]string{"whale.run": x.Run, "whale.position": x.Position, "whale.stage": Name}
	w, err := schemas.NewWriter[schemas.SFTExample](pw, schemas.SFT, opts)
	if err != nil {
		return fmt.Errorf("stage %s: start %s: %w", Name, pw.Key(), err)
	}

	f := &filterer{cfg: cfg, shard: x.Shard, shards: x.Shards, tasks: map[string]*taskCount{}, emit: func(e schemas.SFTExample) error {
		return w.Write(e)
	}}
	for _, fe := range files {
		if err := f.readFile(ctx, x, in, fe); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("stage %s: write %s: %w", Name, pw.Key(), err)
	}
	if _, err := pw.Finish(w.Rows()); err != nil {
		return fmt.Errorf("stage %s: %w", Name, err)
	}
	if err := f.writeAcceptance(ctx, x); err != nil {
		return err
	}
	sum := f.summary(w.Rows())
	fields, err := sum.fields()
	if err != nil {
		return fmt.Errorf("stage %s: %w", Name, err)
	}
	for k, v := range fields {
		x.SetSummary(k, v)
	}
	x.Log.Info("filter done", "shard", x.Shard, "episodes", sum.Episodes, "accepted", sum.Accepted,
		"acceptance_rate", sum.AcceptanceRate, "examples", sum.Examples, "failed", sum.Failed)
	return nil
}

func tablesOf(m *storage.Manifest) []string {
	var out []string
	for _, f := range m.Files {
		if !slices.Contains(out, f.Table) {
			out = append(out, f.Table)
		}
	}
	return out
}

type taskCount struct{ episodes, accepted int64 }

// filterer holds one shard's running counts.
type filterer struct {
	cfg           Config
	shard, shards int
	emit          func(schemas.SFTExample) error

	tasks                      map[string]*taskCount
	episodes, accepted, failed int64
	acceptedTokens, emptyExs   int64
	rewardSum                  float64
}

// mine reports whether task belongs to this shard.
func (f *filterer) mine(task string) bool {
	if f.shards <= 1 {
		return true
	}
	// FNV-1a, inline: hash.Hash32 would allocate once per row.
	h := uint32(2166136261)
	for i := 0; i < len(task); i++ {
		h ^= uint32(task[i])
		h *= 16777619
	}
	return int(h%uint32(f.shards)) == f.shard
}

func (f *filterer) readFile(ctx context.Context, x *stages.Exec, in *storage.Manifest, fe storage.FileEntry) error {
	key := in.FileKey(fe)
	ra, err := x.Open(ctx, in, fe)
	if err != nil {
		return fmt.Errorf("stage %s: open rollouts file %s: %w", Name, key, err)
	}
	var row int64
	err = schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
		defer func() { row++ }()
		if !f.mine(r.TaskID) {
			return nil
		}
		if err := f.add(r); err != nil {
			return fmt.Errorf("row %d (task %q, sample %d): %w", row, r.TaskID, r.Sample, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stage %s: rollouts file %s: %w", Name, key, err)
	}
	return nil
}

func (f *filterer) add(r schemas.Rollout) error {
	if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
		return fmt.Errorf("reward is %v, not a finite number", r.Reward)
	}
	tc := f.tasks[r.TaskID]
	if tc == nil {
		tc = &taskCount{}
		f.tasks[strings.Clone(r.TaskID)] = tc
	}
	tc.episodes++
	f.episodes++
	f.rewardSum += r.Reward
	if r.Error != "" {
		f.failed++
		return nil
	}
	if !(r.Reward > f.cfg.Threshold) {
		return nil
	}
	tc.accepted++
	f.accepted++
	f.acceptedTokens += r.CompletionTokens
	exs, err := Examples(r)
	if err != nil {
		return err
	}
	for _, e := range exs {
		if !slices.Contains(e.TrainMask, true) {
			f.emptyExs++
			continue
		}
		if err := f.emit(e); err != nil {
			return err
		}
	}
	return nil
}

// EpisodeID is the stable id of a rollout row's episode.
func EpisodeID(r schemas.Rollout) string {
	return r.TaskID + "/" + strconv.Itoa(int(r.Sample)) + "@" + r.Position
}

// Examples turns one accepted episode into its training examples, as the
// package doc describes. It does not look at the reward.
func Examples(r schemas.Rollout) ([]schemas.SFTExample, error) {
	ep := EpisodeID(r)
	var contexts []int
	for i, ev := range r.Trace {
		if ev.Kind == KindContext {
			contexts = append(contexts, i)
		}
	}
	if len(contexts) == 0 {
		mask := make([]bool, len(r.Messages))
		for i, m := range r.Messages {
			mask[i] = m.Role == "assistant"
		}
		return []schemas.SFTExample{{ExampleID: ep, EpisodeID: ep, TaskID: r.TaskID, Messages: r.Messages, TrainMask: mask, Tools: r.Tools}}, nil
	}

	var replies []int // indices of assistant messages in the transcript
	for i, m := range r.Messages {
		if m.Role == "assistant" {
			replies = append(replies, i)
		}
	}
	callOfTurn := map[int32]int{} // turn → index of the model call
	var turnOfCall []int32
	calls := 0
	for _, ev := range r.Trace {
		if ev.Kind != KindModel {
			continue
		}
		if _, dup := callOfTurn[ev.Turn]; dup {
			return nil, fmt.Errorf("trace has two model calls at turn %d: cannot tell which one a context belongs to", ev.Turn)
		}
		callOfTurn[ev.Turn] = calls
		turnOfCall = append(turnOfCall, ev.Turn)
		calls++
	}
	if calls != len(replies) {
		return nil, fmt.Errorf("trace has %d model calls but the transcript has %d assistant messages: cannot pair contexts with replies", calls, len(replies))
	}
	out := make([]schemas.SFTExample, 0, calls)
	sent := map[int][]schemas.Message{} // call → the context its event recorded
	seen := map[int32]bool{}
	for _, i := range contexts {
		ev := r.Trace[i]
		if seen[ev.Turn] {
			return nil, fmt.Errorf("trace event %d: a second context event for turn %d", i, ev.Turn)
		}
		seen[ev.Turn] = true
		call, ok := callOfTurn[ev.Turn]
		if !ok {
			return nil, fmt.Errorf("trace event %d: context event for turn %d, but no model call has that turn", i, ev.Turn)
		}
		var msgs []schemas.Message
		if err := json.Unmarshal([]byte(ev.Action), &msgs); err != nil {
			return nil, fmt.Errorf("trace event %d (context of turn %d): action is not a JSON list of messages: %w", i, ev.Turn, err)
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf("trace event %d (context of turn %d): empty message list", i, ev.Turn)
		}
		sent[call] = msgs
	}
	// A call without a context event was sent the default context: the
	// system message and the transcript up to its reply.
	for call, turn := range turnOfCall {
		msgs, ok := sent[call]
		if !ok {
			msgs = slices.Clone(r.Messages[:replies[call]])
		}
		msgs = append(msgs, r.Messages[replies[call]])
		mask := make([]bool, len(msgs))
		mask[len(mask)-1] = true
		id := ep + "#" + strconv.Itoa(int(turn))
		out = append(out, schemas.SFTExample{ExampleID: id, EpisodeID: ep, TaskID: r.TaskID, Messages: msgs, TrainMask: mask, Tools: r.Tools})
	}
	return out, nil
}

type acceptanceRow struct {
	TaskID   string `json:"task_id"`
	Episodes int64  `json:"episodes"`
	Accepted int64  `json:"accepted"`
}

// writeAcceptance writes the per-task counts sorted by task id, one object
// a line so that large files stay greppable.
func (f *filterer) writeAcceptance(ctx context.Context, x *stages.Exec) error {
	pw, err := x.Create(ctx, "acceptance.json")
	if err != nil {
		return err
	}
	defer pw.Abort()
	ids := make([]string, 0, len(f.tasks))
	for id := range f.tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	bw := bufio.NewWriter(pw)
	bw.WriteString("[")
	for i, id := range ids {
		tc := f.tasks[id]
		b, err := json.Marshal(acceptanceRow{TaskID: id, Episodes: tc.episodes, Accepted: tc.accepted})
		if err != nil {
			return err
		}
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
		bw.Write(b)
	}
	bw.WriteString("\n]\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("stage %s: write %s: %w", Name, pw.Key(), err)
	}
	if _, err := pw.Finish(int64(len(ids))); err != nil {
		return fmt.Errorf("stage %s: %w", Name, err)
	}
	return nil
}

func (f *filterer) summary(examples int64) Summary {
	var tasksAccepted int64
	for _, tc := range f.tasks {
		if tc.accepted > 0 {
			tasksAccepted++
		}
	}
	s := Summary{
		Episodes:       f.episodes,
		Accepted:       f.accepted,
		Failed:         f.failed,
		RewardSum:      f.rewardSum,
		AcceptedTokens: f.acceptedTokens,
		Tasks:          int64(len(f.tasks)),
		TasksAccepted:  tasksAccepted,
		Examples:       examples,
		EmptyExamples:  f.emptyExs,
	}
	s.rates()
	return s
}
