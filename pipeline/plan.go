package pipeline

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	harnessrt "github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/filter"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/stages/rollout"
	"github.com/whalerun/whale/storage"
)

// Plan is what runs next in a run and why.
type Plan struct {
	Decision schedule.Decision
	// Stage is the next stage of the decided unit; empty when the run is
	// done.
	Stage string
	// Spec is the stage's execution, inputs and hashed config included.
	Spec stages.Spec
	// Model is the serving name the stage's model calls use; Harness the
	// harness reference in force ("h0" or "sha256:…").
	Model, Harness string
	// Resumed is true when earlier stages of the unit are committed.
	Resumed bool
	// Ignored lists committed folders outside the schedule's positions.
	Ignored []string
}

// Done reports whether the schedule has ended.
func (p *Plan) Done() bool { return p.Decision.Kind == schedule.KindDone }

// Planner decides a run's next stage from its artifacts.
type Planner struct {
	Store *storage.Store
	Run   string
	Spec  *spec.Experiment
}

// sizes are the task counts of the run's datasets.
type sizes struct{ train, search, test int }

// datasetRef resolves a data.* reference to a dataset name in the root.
func datasetRef(field, ref string) (string, error) {
	name, ok := strings.CutPrefix(ref, storage.DatasetsPrefix)
	if !ok || strings.Contains(ref, "://") {
		return "", fmt.Errorf("%s %q: only datasets of the run's root (datasets/NAME, from `whale data import`) are supported", field, ref)
	}
	if err := storage.CheckDataset(name); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return name, nil
}

func (pl *Planner) datasetSize(ctx context.Context, field, ref string) (int, error) {
	if ref == "" {
		return 0, nil
	}
	name, err := datasetRef(field, ref)
	if err != nil {
		return 0, err
	}
	m, err := storage.ReadDataset(ctx, pl.Store, name)
	if errors.Is(err, storage.ErrNotFound) {
		return 0, fmt.Errorf("%s: dataset %s is not in %s: import it with `whale data import`", field, name, pl.Store.URL())
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	var n int64
	for _, f := range m.Table("tasks") {
		n += f.Rows
	}
	return int(n), nil
}

func (pl *Planner) sizes(ctx context.Context) (sizes, error) {
	var z sizes
	var err error
	e := pl.Spec
	if e.HasWeightPhases() {
		if z.train, err = pl.datasetSize(ctx, "data.train", e.Data.Train); err != nil {
			return z, err
		}
	}
	if e.HasHarnessPhases() {
		if z.search, err = pl.datasetSize(ctx, "data.search", e.Data.Search); err != nil {
			return z, err
		}
	}
	if e.Data.Test != "" {
		if z.test, err = pl.datasetSize(ctx, "data.test", e.Data.Test); err != nil {
			return z, err
		}
	}
	return z, nil
}

// Plan reads the run's artifacts and decides its next stage.
func (pl *Planner) Plan(ctx context.Context) (*Plan, error) {
	st, err := scan(ctx, pl.Store, pl.Run)
	if err != nil {
		return nil, err
	}
	return pl.planFrom(ctx, st)
}

// planFrom is Plan over a reading of the run's artifacts that the caller
// also uses for something else.
func (pl *Planner) planFrom(ctx context.Context, st *state) (*Plan, error) {
	z, err := pl.sizes(ctx)
	if err != nil {
		return nil, err
	}
	hist, open, err := st.history()
	if err != nil {
		return nil, err
	}
	in := schedule.Inputs{Experiment: pl.Spec, TrainSize: z.train, TestSize: z.test, SearchSize: z.search}
	d, err := schedule.Next(in, hist)
	if err != nil {
		return nil, fmt.Errorf("plan run %s: %w", pl.Run, err)
	}
	p := &Plan{Decision: d, Ignored: st.ignored}
	if d.Kind == schedule.KindDone {
		return p, nil
	}
	if open != nil && open.pos.String() != d.Position {
		return nil, fmt.Errorf("plan run %s: position %s has committed stages but is not finished, and the schedule continues at %s: "+
			"rerun its missing stages with `whale stage` or remove them", pl.Run, open.pos, d.Position)
	}
	pos, err := schedule.ParsePosition(d.Position)
	if err != nil {
		return nil, err
	}
	committed := map[string]*storage.Manifest{}
	if u := st.find(d.Position); u != nil {
		committed = u.stages
	}
	for _, name := range unitStages(d.Kind, d.Index) {
		if committed[name] == nil {
			p.Stage = name
			break
		}
		p.Resumed = true
	}
	if p.Stage == "" {
		return nil, fmt.Errorf("plan run %s: unit %s is complete but the schedule chose it again", pl.Run, d.Position)
	}
	if err := pl.fill(ctx, p, st, pos, committed); err != nil {
		return nil, err
	}
	return p, nil
}

// PlanAt is the plan of stage name at position, which must be a position
// the run has reached (it holds committed stages, or it is where the
// schedule continues), and a stage of that position's unit.
func (pl *Planner) PlanAt(ctx context.Context, name, position string) (*Plan, error) {
	pos, err := schedule.ParsePosition(position)
	if err != nil {
		return nil, err
	}
	st, err := scan(ctx, pl.Store, pl.Run)
	if err != nil {
		return nil, err
	}
	next, err := pl.planFrom(ctx, st)
	if err != nil {
		return nil, err
	}
	var d schedule.Decision
	committed := map[string]*storage.Manifest{}
	switch u := st.find(position); {
	case u != nil:
		d = schedule.Decision{Kind: u.kind, Phase: u.phase, Round: pos.Round, Index: pos.Index, Position: position,
			Reason: "rerun by hand"}
		committed = u.stages
	case !next.Done() && next.Decision.Position == position:
		d = next.Decision
	default:
		return nil, fmt.Errorf("run %s has not reached position %s (it continues at %s)", pl.Run, position, cmp.Or(next.Decision.Position, "its end"))
	}
	stagesHere := unitStages(d.Kind, d.Index)
	if !slices.Contains(stagesHere, name) {
		return nil, fmt.Errorf("position %s runs %s, not %s", position, strings.Join(stagesHere, ", "), name)
	}
	for _, before := range stagesHere {
		if before == name {
			break
		}
		if committed[before] == nil {
			return nil, fmt.Errorf("%s at %s needs %s at %s, which is not committed", name, position, before, position)
		}
	}
	p := &Plan{Decision: d, Stage: name, Ignored: st.ignored}
	if err := pl.fill(ctx, p, st, pos, committed); err != nil {
		return nil, err
	}
	return p, nil
}

// modelID is the model id of the stages that use the finetune manifest
// model (nil: none yet): what they record and, but for vllm-weights, ask
// the servers for. It is the manifest's "model_id" summary when the reload
// put that checkpoint on the servers — vllm-lora and command serve it
// under that id, vllm-weights under model.name (modelFor then asks for
// the served name) — else model.name: reload none leaves the servers to
// the trainer, which keeps the name.
func modelID(e *spec.Experiment, model *storage.Manifest) string {
	if model == nil || e.Finetune.Reload == spec.ReloadNone || e.Finetune.Reload == "" {
		return e.Model.Name
	}
	if id, _ := model.Summary[finetune.SumModelID].(string); id != "" {
		return id
	}
	return e.Model.Name
}

// StageSeed derives a stage's seed from the run's: every stage draws from
// its own stream, and rerunning a stage reproduces its episodes.
func StageSeed(runSeed int64, position, stage string) int64 {
	h := sha256.Sum256(fmt.Appendf(nil, "whale-seed/%d/%s/%s", runSeed, position, stage))
	return int64(binary.BigEndian.Uint64(h[:8]) >> 1)
}

// fill sets the stage's spec: inputs, config, seed, shards.
func (pl *Planner) fill(ctx context.Context, p *Plan, st *state, pos schedule.Pos, here map[string]*storage.Manifest) error {
	e := pl.Spec
	d := p.Decision
	spc := stages.Spec{
		Run:      pl.Run,
		Position: d.Position,
		Seed:     StageSeed(e.Seed, d.Position, p.Stage),
		// Stamped on rollout rows for readers outside whale; not hashed.
		Place: stages.Place{Schedule: e.Schedule, Round: d.Round, Section: string(d.Kind)},
	}
	model := st.model(pos)
	p.Model = modelID(e, model)
	modelInput := func() {
		if model != nil {
			spc.Inputs = append(spc.Inputs, stages.InputRef{Name: "model", Key: model.Dir})
		}
	}
	initial := e.Harness.Initial
	if src, ok, err := e.BuiltinInitial(); err != nil {
		return err
	} else if ok {
		// A named built-in harness (init archived it): stages know it by
		// its content id.
		initial = harnessrt.SourceID(src)
	}
	harness, err := st.harness(pos, initial)
	if err != nil {
		return err
	}
	p.Harness = harness
	dataset := func(field, ref string) (stages.InputRef, error) {
		name, err := datasetRef(field, ref)
		return stages.InputRef{Name: "tasks", Key: storage.DatasetsPrefix + name}, err
	}

	switch p.Stage {
	case StageRollout:
		in, err := dataset("data.train", e.Data.Train)
		if err != nil {
			return err
		}
		spc.Inputs = append(spc.Inputs, in)
		modelInput()
		step := 0
		for _, u := range st.before(pos) {
			if u.kind == schedule.KindWeight {
				step++
			}
		}
		// Every weight step shuffles with the run's seed, not the
		// stage's, so that the steps of an epoch share its order.
		shuffle := e.Seed
		spc.Config = rollout.Config{
			Domain:    e.Domain,
			Harness:   harness,
			ModelName: p.Model,
			Sampling:  sampling(e.Model),
			Samples:   e.RSFT.GroupSize,
			Offset:    step * e.RSFT.BatchSize,
			Limit:     e.RSFT.BatchSize,
			Shuffle:   &shuffle,
		}
		spc.Shards = e.Rollout.Shards
	case StageFilter:
		spc.Inputs = []stages.InputRef{{Name: "rollouts", Key: here[StageRollout].Dir}}
		spc.Config = filter.Config{Threshold: e.RSFT.Threshold}
	case StageFinetune:
		spc.Inputs = []stages.InputRef{{Name: "sft", Key: here[StageFilter].Dir}}
		if model != nil {
			spc.Inputs = append(spc.Inputs, stages.InputRef{Name: "base", Key: model.Dir})
		}
		f := e.Finetune
		spc.Config = finetune.Config{
			Backend:        f.Backend,
			Command:        f.Command,
			Env:            f.Env,
			BaseCheckpoint: e.Model.Checkpoint,
			ModelName:      e.Model.Name,
			LearningRate:   e.RSFT.LearningRate,
			Epochs:         e.RSFT.SFTEpochs,
			LoRA:           e.RSFT.LoRA,
			LoRARank:       e.RSFT.LoRARank,
			LoRAAlpha:      e.RSFT.LoRAAlpha,
			MaskReasoning:  e.RSFT.MaskReasoning,
			Reload:         f.Reload,
			ReloadCommand:  f.ReloadCommand,
			Srun:           f.Srun,
			SrunArgs:       f.SrunArgs,
		}
		if f.OnFailure == spec.OnFailureSkip {
			cfg := spc.Config.(finetune.Config)
			cfg.OnFailure = finetune.OnFailureSkip
			spc.Config = cfg
		}
	case StagePropose:
		in, err := dataset("data.search", e.Data.Search)
		if err != nil {
			return err
		}
		spc.Inputs = append(spc.Inputs, in)
		modelInput()
		for i, m := range st.archive(d.Phase, pos) {
			spc.Inputs = append(spc.Inputs, stages.InputRef{Name: fmt.Sprintf("archive-%d", i), Key: m.Dir})
		}
		h := e.Harness
		cfg := propose.Config{
			Backend:      h.Proposer,
			M:            h.CandidatesPerIteration,
			PromptOnly:   h.PromptOnly,
			Parent:       harness,
			Iteration:    d.Index,
			Domain:       e.Domain,
			AgentCommand: h.Agent.Command,
			AgentEnv:     h.Agent.Env,
		}
		if propose.UsesLLM(h.Proposer) {
			cfg.LLM = propose.LLMConfig{Model: h.LLM.Name, Temperature: &h.LLM.Temperature, MaxTokens: h.LLM.MaxTokens}
		}
		if h.Proposer == propose.BackendAgent {
			// The agent's ./try plays what the search-set evaluation
			// would: the plan's model with the run's decoding.
			cfg.Prototype = &propose.Prototype{ModelName: p.Model, Sampling: sampling(e.Model), Episodes: propose.DefaultPrototypeEpisodes}
		}
		spc.Config = cfg
	case StageEvaluate:
		if err := pl.fillEvaluate(p, &spc, pos, here, harness, dataset); err != nil {
			return err
		}
		modelInput()
	default:
		return fmt.Errorf("plan: unknown stage %q", p.Stage)
	}
	p.Spec = spc
	return nil
}

func sampling(m spec.Model) rollout.Sampling {
	s := rollout.Sampling{Temperature: &m.Temperature, TopP: &m.TopP}
	if m.TopK > 0 {
		k := m.TopK
		s.TopK = &k
	}
	if m.MaxTokens > 0 {
		n := int64(m.MaxTokens)
		s.MaxTokens = &n
	}
	s.Stop = m.Stop
	return s
}
