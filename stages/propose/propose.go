package propose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	harchive "github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Name is the stage name.
const Name = "propose"

// ParentH0 names the domain's baseline harness as a parent.
const ParentH0 = "h0"

// MaxCandidates bounds Config.M: every candidate costs a search-set
// evaluation (256 rollouts in the paper), so a larger batch is a typo.
const MaxCandidates = 32

// Axes are the mechanisms a candidate may change, one per candidate
// (WHALE: prompts, tool I/O formatting, error feedback, retry and turn
// budgets, retrieval parameters, query rewriting, board presentation,
// move parsing):
//
//	prompt       SYSTEM_PROMPT, USER_PROMPT, format_observation wording
//	retries      FORMAT_RETRIES, ILLEGAL_RETRIES, on_error feedback
//	turns        MAX_TURNS, MAX_TOKENS, should_stop
//	parsing      parse_action (answer and move extraction)
//	context      build_messages (what the model sees of the history)
//	tool-format  format_tool_result, tool constants (CODE_TOOL, MAX_OUTPUT_CHARS)
//	retrieval    TOPK, MAX_DOC_CHARS, query rewriting
//	board        BOARD_FORMAT, SHOW_LEGAL_MOVES, MOVE_FORMAT
//	other        a domain constant none of the above covers
//
// The mutate backend always uses these, and so does the archive backend
// except for a combination of edits on several axes ("combined"); the llm
// and agent backends are asked to, and an axis they name outside the list
// is kept as written.
var Axes = []string{"prompt", "retries", "turns", "parsing", "context", "tool-format", "retrieval", "board", "other"}

// Config is the hashed configuration of a propose stage.
type Config struct {
	// Backend is a name of the table of backends: mutate, archive, llm or agent
	// (see Backends).
	Backend string `json:"backend"`
	// M is how many candidates to propose.
	M int `json:"m"`
	// PromptOnly restricts candidates to new values of SYSTEM_PROMPT and
	// USER_PROMPT (Fast-Slow Training's prompt-only search).
	PromptOnly bool `json:"prompt_only"`
	// Parent is the harness the candidates start from: "h0" (the domain's
	// baseline) or a harness id "sha256:<hex>", normally the phase's best.
	Parent string `json:"parent"`
	// Iteration is the harness iteration within the phase; it seeds the
	// mutate backend together with the stage's seed.
	Iteration int `json:"iteration"`
	// Domain is the domain's name; it must match Stage.Domain.
	Domain string `json:"domain"`
	// AgentCommand is run with /bin/sh -c in the agent's workspace.
	AgentCommand string `json:"agent_command,omitempty"`
	// AgentEnv names the variables of whale's environment that the agent
	// gets besides AgentBaseEnv, such as the coding agent's own API key
	// (ANTHROPIC_API_KEY); see CheckAgentEnv for the names refused. Empty
	// leaves the config's JSON, and so the stage's identity, as it was
	// before the field existed.
	AgentEnv []string `json:"agent_env,omitempty"`
	// Prototype lets the agent backend's agent play harnesses on
	// search-set tasks (./try) with the run's model, tools and decoding,
	// within a budget of episodes; nil: it cannot. Omitted when nil, so
	// the identity of a stage without it is as before the field existed.
	Prototype *Prototype `json:"prototype,omitempty"`
	// LLM is the llm backend's model and decoding.
	LLM LLMConfig `json:"llm,omitzero"`
}

// LLMConfig is the llm backend's model. Model is recorded (it names the
// proposer); Stage.LLM must be a client of that model.
type LLMConfig struct {
	Model       string   `json:"model,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
}

// Validate checks the configuration before anything runs.
func (c Config) Validate() error {
	var errs []error
	b, err := backendFor(c.Backend)
	if err != nil {
		errs = append(errs, err)
	}
	if c.M < 1 || c.M > MaxCandidates {
		errs = append(errs, fmt.Errorf("m %d: want 1 to %d candidates", c.M, MaxCandidates))
	}
	if c.Parent != ParentH0 && !harnessIDRE.MatchString(c.Parent) {
		errs = append(errs, fmt.Errorf("parent %q: want %q or a harness id sha256:<64 hex digits>", c.Parent, ParentH0))
	}
	if c.Iteration < 0 {
		errs = append(errs, fmt.Errorf("iteration %d: want ≥ 0", c.Iteration))
	}
	if c.Domain == "" {
		errs = append(errs, errors.New("domain is empty"))
	}
	if b.check != nil {
		errs = append(errs, b.check(c)...)
	}
	errs = append(errs, c.Prototype.check(c.Backend)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("propose config: %w", err)
	}
	return nil
}

var harnessIDRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Sources is a store of harness sources by id, such as the content-addressed
// harness store of the bucket (harnesses/<hex>/harness.star). Get returns
// an error matching storage.ErrNotFound when it has no such harness.
type Sources interface {
	Get(ctx context.Context, id string) ([]byte, error)
}

// Stage is the propose stage. Its fields are the runtime, not hashed:
// they must not change what a correct run proposes, only how it gets there.
type Stage struct {
	// Domain is the domain of Config.Domain: its contract, baseline and
	// environments for the dry runs.
	Domain episode.Domain
	// Log defaults to the Exec's logger.
	Log *slog.Logger
	// LLM answers the llm backend's request; a *models.Client of
	// Config.LLM.Model.
	LLM episode.Chatter
	// Model plays the agent's prototypes (Config.Prototype): a client of
	// the run's endpoints asking for Config.Prototype.ModelName. Domain
	// must then be wired to the run's tools.
	Model episode.Chatter
	// AgentTimeout bounds the agent command (default 1 hour).
	AgentTimeout time.Duration
	// Sources, when set, resolves a parent that no candidates table of
	// the archive holds.
	Sources Sources
	// WorkDir holds the agent's workspace (default: the system's temporary
	// directory). The workspace is removed afterwards unless KeepWorkspace.
	WorkDir       string
	KeepWorkspace bool
	// RootDir is the directory of a file:// root (StoreDir): the agent
	// runs only under bubblewrap, which hides it, lest the agent read or
	// rewrite the bucket (ErrNoAgentSandbox where there is none).
	RootDir string
	// Hide are more folders the agent's sandbox hides (whale's caches);
	// its home, caches and temporary folders are always hidden.
	Hide []string
	// SecretEnv names variables holding credentials whose names need not
	// look secret (the experiment's api_key_env fields): their values are
	// scrubbed from what the agent sees and from agent.log, as those of
	// secret-named variables are.
	SecretEnv []string
	// DryRunTimeout bounds each dry-run episode (default 1 minute).
	DryRunTimeout time.Duration
}

// Name implements stages.Stage.
func (*Stage) Name() string { return Name }

// Rejection is one proposal that did not become a candidate, as
// rejected.json lists it.
type Rejection struct {
	Name      string `json:"name"`
	HarnessID string `json:"harness_id,omitempty"`
	Axis      string `json:"axis,omitempty"`
	Proposer  string `json:"proposer"`
	// Kind classifies the reason, for the summary: see the Reject* constants.
	Kind string `json:"kind"`
	// Reason says what was wrong, with file:line where there is one.
	Reason string `json:"reason"`
	// Source is the rejected code, when there was any.
	Source string `json:"source,omitempty"`
}

// Kinds of rejection.
const (
	RejectNoCode      = "no_code"       // the reply or workspace held no harness for this slot
	RejectInvalid     = "invalid"       // does not compile or breaks the hook contract
	RejectDuplicate   = "duplicate"     // same code as the parent, an archived candidate or one earlier in the batch
	RejectPromptOnly  = "prompt_only"   // changes more than SYSTEM_PROMPT and USER_PROMPT
	RejectDryRun      = "dry_run"       // a hook failed while playing a dry-run task
	RejectOverLimit   = "over_limit"    // more proposals than M
	RejectAgentQuiet  = "agent_nothing" // the agent wrote no candidate
	RejectProposalBad = "bad_proposal"  // a workspace entry that is not a readable candidate
)

// proposal is one harness a backend came up with, before validation.
type proposal struct {
	Name       string
	Hypothesis string
	Axis       string
	Source     []byte
	edited     string // mutate: the constant it changes
}

// outcome is what a backend returns: its proposals and the slots it
// could not fill, already rejected.
type outcome struct {
	proposals []proposal
	rejected  []Rejection
	summary   map[string]any
}

// Run implements stages.Stage: it proposes, validates and writes
// candidates.parquet and rejected.json.
func (s *Stage) Run(ctx context.Context, x *stages.Exec) error {
	var cfg Config
	if err := x.DecodeConfig(&cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if x.Shards != 1 {
		return fmt.Errorf("propose: runs as one shard, not %d", x.Shards)
	}
	if s.Domain == nil {
		return errors.New("propose: no domain given to the stage")
	}
	if s.Domain.Name() != cfg.Domain {
		return fmt.Errorf("propose: config.domain is %q but the stage was given domain %q", cfg.Domain, s.Domain.Name())
	}
	log := s.Log
	if log == nil {
		log = x.Log
	}
	if log == nil {
		log = slog.Default()
	}
	contract := s.Domain.Contract()
	b, err := backendFor(cfg.Backend)
	if err != nil {
		return err // Validate has said so
	}

	arch, err := readArchive(ctx, x, s.Domain, b.episodes)
	if err != nil {
		return err
	}
	if err := arch.fill(ctx, s.Sources); err != nil {
		return err
	}
	parentSrc, err := s.resolveParent(ctx, cfg.Parent, arch)
	if err != nil {
		return err
	}
	parentID := harness.SourceID(parentSrc)
	parent, err := harness.Load(parentName(cfg.Parent, arch, parentID), parentSrc, harness.Options{Contract: contract})
	if err != nil {
		return fmt.Errorf("propose: the parent harness %s does not load under the %s contract: %w", parentID, contract.Name, err)
	}
	tasks, err := dryRunTasks(ctx, x)
	if err != nil {
		return err
	}

	in := &input{cfg: cfg, seed: x.Seed, contract: contract, parent: parent, arch: arch, log: log}
	proposer := b.proposer(cfg)
	out, err := b.propose(s, ctx, x, in)
	if err != nil {
		return err
	}

	v := newValidator(s, in, tasks)
	var valid []schemas.Candidate
	rejected := out.rejected
	for i, p := range out.proposals {
		p.Name = uniqueName(p.Name, i, v.names)
		p.Axis = normalizeAxis(p.Axis)
		c, rej := v.validate(ctx, p)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rej != nil {
			rej.Proposer = proposer
			rejected = append(rejected, *rej)
			log.Info("candidate rejected", "name", p.Name, "kind", rej.Kind, "reason", rej.Reason)
			continue
		}
		c.Proposer = proposer
		valid = append(valid, c)
		log.Info("candidate accepted", "name", c.Name, "axis", c.Axis, "harness_id", c.HarnessID)
	}
	for i := range rejected {
		if rejected[i].Proposer == "" {
			rejected[i].Proposer = proposer
		}
	}

	if err := writeCandidates(ctx, x, valid, cfg, parentID); err != nil {
		return err
	}
	if err := writeRejected(ctx, x, rejected); err != nil {
		return err
	}
	byKind := map[string]int{}
	for _, r := range rejected {
		byKind[r.Kind]++
	}
	x.SetSummary("backend", cfg.Backend)
	x.SetSummary("parent", parentID)
	x.SetSummary("proposed", len(valid)+len(rejected))
	x.SetSummary("valid", len(valid))
	x.SetSummary("rejected", len(rejected))
	x.SetSummary("rejected_by_reason", byKind)
	x.SetSummary("dry_run_env_errors", v.envErrors)
	for _, k := range slices.Sorted(maps.Keys(out.summary)) {
		x.SetSummary(k, out.summary[k])
	}
	log.Info("propose done", "backend", cfg.Backend, "valid", len(valid), "rejected", len(rejected))
	return nil
}

// input is what every backend sees.
type input struct {
	cfg      Config
	seed     int64
	contract *harness.Contract
	parent   *harness.Harness
	arch     *archive
	log      *slog.Logger
}

func (s *Stage) resolveParent(ctx context.Context, parent string, arch *archive) ([]byte, error) {
	base := s.Domain.Baseline()
	if parent == ParentH0 || parent == harness.SourceID(base) {
		return base, nil
	}
	if c, ok := arch.sources[parent]; ok {
		return []byte(c.Source), nil
	}
	if s.Sources == nil {
		return nil, fmt.Errorf("propose: parent %s: not h0 and not in a candidates table of the archive inputs (%s); give the stage a harness store", parent, arch.describeInputs())
	}
	src, err := s.Sources.Get(ctx, parent)
	if err != nil {
		return nil, fmt.Errorf("propose: parent %s: %w", parent, err)
	}
	if got := harness.SourceID(src); got != parent {
		return nil, fmt.Errorf("propose: parent %s: the harness store returned a source whose id is %s", parent, got)
	}
	return src, nil
}

func parentName(parent string, arch *archive, id string) string {
	if parent == ParentH0 {
		return "h0.star"
	}
	if c, ok := arch.sources[id]; ok && c.Name != "" {
		return sanitizeName(c.Name) + ".star"
	}
	return "parent.star"
}

// dryRunTasks are the first two rows of the "tasks" input.
func dryRunTasks(ctx context.Context, x *stages.Exec) ([]schemas.Task, error) {
	in, err := x.Input("tasks")
	if err != nil {
		return nil, fmt.Errorf("propose: the dry run needs a tasks input: %w", err)
	}
	var tasks []schemas.Task
	for _, f := range in.Table(schemas.Tasks.Name) {
		if len(tasks) == 2 {
			break
		}
		ra, err := x.Open(ctx, in, f)
		if err != nil {
			return nil, fmt.Errorf("propose: open tasks %s: %w", f.Name, err)
		}
		rows, err := schemas.Head[schemas.Task](ctx, ra, ra.Size(), 2-len(tasks))
		if err != nil {
			return nil, fmt.Errorf("propose: read tasks %s: %w", in.FileKey(f), err)
		}
		tasks = append(tasks, rows...)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("propose: the tasks input %s has no rows for the dry run", in.Dir)
	}
	return tasks, nil
}

func writeCandidates(ctx context.Context, x *stages.Exec, rows []schemas.Candidate, cfg Config, parentID string) error {
	w, err := x.Create(ctx, "candidates.parquet")
	if err != nil {
		return err
	}
	pw, err := schemas.NewWriter[schemas.Candidate](w, schemas.Candidates, schemas.WriterOptions{Metadata: map[string]string{
		"whale.propose.backend": cfg.Backend,
		"whale.propose.parent":  parentID,
	}})
	if err == nil {
		err = pw.Write(rows...)
	}
	if err == nil {
		err = pw.Close()
	}
	if err != nil {
		w.Abort()
		return fmt.Errorf("propose: write candidates.parquet: %w", err)
	}
	w.SetRows(int64(len(rows)))
	if err := w.Close(); err != nil {
		return fmt.Errorf("propose: upload candidates.parquet: %w", err)
	}
	return nil
}

func writeRejected(ctx context.Context, x *stages.Exec, rows []Rejection) error {
	if rows == nil {
		rows = []Rejection{}
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return fmt.Errorf("propose: encode rejected.json: %w", err)
	}
	w, err := x.Create(ctx, "rejected.json")
	if err != nil {
		return err
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		w.Abort()
		return fmt.Errorf("propose: write rejected.json: %w", err)
	}
	w.SetRows(int64(len(rows)))
	if err := w.Close(); err != nil {
		return fmt.Errorf("propose: upload rejected.json: %w", err)
	}
	return nil
}

var nameRE = regexp.MustCompile(`[^a-z0-9]+`)

// sanitizeName makes a name safe for a file name and a table cell:
// lowercase letters, digits and dashes, at most 48 bytes.
func sanitizeName(s string) string {
	s = strings.Trim(nameRE.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 48 {
		s = strings.TrimRight(s[:48], "-")
	}
	return s
}

// uniqueName sanitizes name (or makes one from the slot) and makes it
// unique among taken, which it updates.
func uniqueName(name string, slot int, taken map[string]bool) string {
	base := sanitizeName(name)
	if base == "" {
		base = fmt.Sprintf("candidate-%d", slot+1)
	}
	n := base
	for i := 2; taken[n]; i++ {
		n = fmt.Sprintf("%s-%d", base, i)
	}
	taken[n] = true
	return n
}

func normalizeAxis(a string) string {
	a = strings.ToLower(strings.TrimSpace(a))
	a = strings.Trim(a, "`*\"' .")
	a = strings.ReplaceAll(a, "_", "-")
	a = strings.ReplaceAll(a, " ", "-")
	if a == "" {
		return "unspecified"
	}
	if len(a) > 32 {
		a = a[:32]
	}
	return a
}

// storeSources reads the bucket's content-addressed harness store.
type storeSources struct{ s *storage.Store }

// StoreSources is Sources over a bucket's harness archive
// (harnesses/<hex>/harness.star, see package harness/archive).
func StoreSources(s *storage.Store) Sources { return storeSources{s} }

func (ss storeSources) Get(ctx context.Context, id string) ([]byte, error) {
	return harchive.Get(ctx, ss.s, id)
}
