package spec

import (
	"reflect"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/pipeline/schedule/schedules"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
)

// Names of the experiment file's enumerations. Domains are those of
// domains/registry, schedules those of pipeline/schedule/schedules,
// proposers those of propose.Backends() and finetune backends those of
// finetune.Backends() (the names here are for callers that pick one).
const (
	ScheduleWhale       = "whale"
	ScheduleWeightsOnly = "weights-only"
	ScheduleHarnessOnly = "harness-only"
	ScheduleStagewise   = "stagewise"
	ScheduleFST         = "fst"

	SwitchFixed    = "fixed"
	SwitchPatience = "patience"

	ProviderOpenAI = "openai"
	ProviderLocal  = "local"

	ProposerMutate  = propose.BackendMutate
	ProposerArchive = propose.BackendArchive
	ProposerLLM     = propose.BackendLLM
	ProposerAgent   = propose.BackendAgent

	FinetuneCommand = finetune.BackendCommand
	FinetuneLocal   = finetune.BackendLocal

	SandboxLocal = "local"

	// RetrieverIndexPrefix marks a tools.retriever that names a stored index.
	RetrieverIndexPrefix = "index:"

	OnFailureStop = finetune.OnFailureStop
	OnFailureSkip = finetune.OnFailureSkip

	ReloadNone        = finetune.ReloadNone
	ReloadVLLMLoRA    = finetune.ReloadVLLMLoRA
	ReloadVLLMWeights = finetune.ReloadVLLMWeights
	ReloadCommand     = finetune.ReloadCommand
)

var (
	Switches  = []string{SwitchFixed, SwitchPatience}
	Providers = []string{ProviderOpenAI, ProviderLocal}
	Reloads   = []string{ReloadNone, ReloadVLLMLoRA, ReloadVLLMWeights, ReloadCommand}
)

// Experiment is one experiment file. Field comments give the YAML key, the
// default and the unit.
type Experiment struct {
	// Name names the run: lowercase letters, digits and '-', used in bucket
	// paths and job names.
	Name string `yaml:"name" json:"name"`
	// Description is free text for the report.
	Description string `yaml:"description" json:"description"`
	// Domain is one of domains/registry: searchqa, math, chess, demo.
	Domain string `yaml:"domain" json:"domain"`
	// Schedule is whale (alternation), weights-only, harness-only,
	// stagewise or fst (alternation with prompt-only harness search).
	Schedule string   `yaml:"schedule" json:"schedule"`
	Switch   Switch   `yaml:"switch" json:"switch"`
	Data     Data     `yaml:"data" json:"data"`
	Model    Model    `yaml:"model" json:"model"`
	RSFT     RSFT     `yaml:"rsft" json:"rsft"`
	Harness  Harness  `yaml:"harness" json:"harness"`
	Finetune Finetune `yaml:"finetune" json:"finetune"`
	Budget   Budget   `yaml:"budget" json:"budget"`
	Eval     Eval     `yaml:"eval" json:"eval"`
	Rollout  Rollout  `yaml:"rollout" json:"rollout"`
	Tools    Tools    `yaml:"tools" json:"tools"`
	// Slurm is the sbatch resources of `whale submit slurm` jobs.
	Slurm Slurm `yaml:"slurm" json:"slurm"`
	// Seed is the root of every random choice of the run (default 1).
	Seed int64 `yaml:"seed" json:"seed"`
}

// Switch says when the alternation moves from one phase to the other.
// In YAML it may be written as a mapping or as the bare mode:
// `switch: patience`.
type Switch struct {
	// Mode is fixed or patience (default fixed).
	Mode     string         `yaml:"mode" json:"mode"`
	Fixed    FixedSwitch    `yaml:"fixed" json:"fixed"`
	Patience PatienceSwitch `yaml:"patience" json:"patience"`
}

func (Switch) shorthandField() string { return "mode" }

// FixedSwitch is the fixed schedule (E, I) of the paper; default (0.6, 6).
type FixedSwitch struct {
	// Epochs of weight steps per weight phase.
	Epochs float64 `yaml:"epochs" json:"epochs"`
	// Iterations per harness phase; the evaluation of the incoming harness
	// counts as the first.
	Iterations int `yaml:"iterations" json:"iterations"`
}

// PatienceSwitch is the adaptive rule. The weight-phase values are in epochs
// (0.2 each in the paper); the harness-phase values are in iterations.
type PatienceSwitch struct {
	Window          float64 `yaml:"window" json:"window"`
	BurnIn          float64 `yaml:"burn_in" json:"burn_in"`
	Patience        float64 `yaml:"patience" json:"patience"`
	HarnessMin      int     `yaml:"harness_min" json:"harness_min"`
	HarnessPatience int     `yaml:"harness_patience" json:"harness_patience"`
	HarnessCap      int     `yaml:"harness_cap" json:"harness_cap"`
}

// Data names the task tables: a dataset reference such as
// "datasets/nq-train" (relative to the root) or a URL.
type Data struct {
	// Train feeds the weight steps.
	Train string `yaml:"train" json:"train"`
	// Search is the fixed harness search set D_harness.
	Search string `yaml:"search" json:"search"`
	// Test is scored with mean@k after each phase.
	Test string `yaml:"test" json:"test"`
}

// Model is the target model being trained and the endpoints that serve it.
type Model struct {
	// Provider is openai (OpenAI-compatible endpoints) or local (the built-in
	// model); default local for the demo domain without endpoints, else openai.
	Provider string `yaml:"provider" json:"provider"`
	// Name is the model name sent to the endpoints.
	Name string `yaml:"name" json:"name"`
	// Checkpoint is where the initial weights live for fine-tuning; default
	// Name.
	Checkpoint string   `yaml:"checkpoint" json:"checkpoint"`
	Endpoints  []string `yaml:"endpoints" json:"endpoints"`
	// APIKeyEnv names the environment variable holding the API key; the key
	// itself never appears in a spec.
	APIKeyEnv   string  `yaml:"api_key_env" json:"api_key_env"`
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopK of -1 or 0 disables top-k sampling.
	TopK      int     `yaml:"top_k" json:"top_k"`
	TopP      float64 `yaml:"top_p" json:"top_p"`
	MaxTokens int     `yaml:"max_tokens" json:"max_tokens"`
	// Stop sequences sent with every call, before the harness's STOP; the
	// loop cuts a reply at the end of its parsed action either way.
	Stop []string `yaml:"stop" json:"stop,omitempty"`
	// Concurrency is the number of requests in flight per endpoint.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// Extra is merged into every request body (vendor extras such as
	// chat_template_kwargs); it may not set the core sampling fields.
	Extra map[string]any `yaml:"extra" json:"extra"`
}

// RSFT is online rejection-sampling fine-tuning: one weight step samples
// GroupSize rollouts for each of BatchSize prompts and trains on the ones
// whose reward exceeds Threshold.
type RSFT struct {
	GroupSize int     `yaml:"group_size" json:"group_size"`
	BatchSize int     `yaml:"batch_size" json:"batch_size"`
	Threshold float64 `yaml:"threshold" json:"threshold"`
	// LearningRate defaults by domain (registry.Entry.LearningRate): 1e-6
	// searchqa, 1e-7 math and chess (the paper's), 1e-3 for the built-in
	// demo model.
	LearningRate float64 `yaml:"learning_rate" json:"learning_rate"`
	// SFTEpochs over the accepted set per step (1 in the paper).
	SFTEpochs int  `yaml:"sft_epochs" json:"sft_epochs"`
	LoRA      bool `yaml:"lora" json:"lora"`
	LoRARank  int  `yaml:"lora_rank" json:"lora_rank"`
	LoRAAlpha int  `yaml:"lora_alpha" json:"lora_alpha"`
	// MaskReasoning keeps the reasoning of assistant messages (vLLM's
	// reasoning_content) in the training context but out of the loss. The
	// default trains on it: it is model-written text, and the paper trains
	// on exactly what the model produced.
	MaskReasoning bool `yaml:"mask_reasoning" json:"mask_reasoning,omitempty"`
}

// Harness configures Meta-Harness search.
type Harness struct {
	// Initial is the starting harness: a built-in harness of the domain by
	// name ("h0", the paper's, or a named variant such as "h0-tags"; see
	// registry.Entry.HarnessNames) or a harness id ("sha256:<hex>") in the
	// root's archive. init stores a named variant in the archive and the
	// planner hands stages its id (BuiltinInitial).
	Initial                string `yaml:"initial" json:"initial"`
	CandidatesPerIteration int    `yaml:"candidates_per_iteration" json:"candidates_per_iteration"`
	SearchSetSize          int    `yaml:"search_set_size" json:"search_set_size"`
	// SamplesPerCandidate is the rollouts per candidate–example pair.
	SamplesPerCandidate int `yaml:"samples_per_candidate" json:"samples_per_candidate"`
	// Proposer is a name of propose.Backends(): mutate, archive, llm or agent;
	// default agent, mutate for demo.
	Proposer string `yaml:"proposer" json:"proposer"`
	// PromptOnly restricts edits to the prompts; always true for fst.
	PromptOnly bool          `yaml:"prompt_only" json:"prompt_only"`
	Agent      AgentProposer `yaml:"agent" json:"agent"`
	LLM        LLMProposer   `yaml:"llm" json:"llm"`
}

// AgentProposer runs an external coding agent in a workspace.
type AgentProposer struct {
	// Command is run with /bin/sh -c in the workspace.
	Command string `yaml:"command" json:"command"`
	// Env names the variables of whale's environment passed through to
	// the agent, such as its own API key (ANTHROPIC_API_KEY); default
	// none. The agent gets only these and an allow-list (PATH, locale,
	// TZ, TERM; see propose.AgentBaseEnv), never the bucket's credentials.
	Env []string `yaml:"env" json:"env,omitempty"`
}

// LLMProposer asks an OpenAI-compatible chat model for candidates.
type LLMProposer struct {
	Name        string   `yaml:"name" json:"name"`
	Endpoints   []string `yaml:"endpoints" json:"endpoints"`
	APIKeyEnv   string   `yaml:"api_key_env" json:"api_key_env"`
	Temperature float64  `yaml:"temperature" json:"temperature"`
	MaxTokens   int      `yaml:"max_tokens" json:"max_tokens"`
}

// Finetune says how a weight step trains and how inference picks up the
// new weights.
type Finetune struct {
	// Backend is a name of finetune.Backends(): command (an external
	// trainer) or local (the built-in model); default local when the model
	// provider is local.
	Backend string `yaml:"backend" json:"backend"`
	// Command is run with /bin/sh -c; the SFT table, base checkpoint and
	// output directory are passed in the environment.
	Command string            `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env"`
	// Reload is how the inference servers are told to use the new
	// checkpoint: vllm-lora (load the adapter under the step's model id),
	// vllm-weights (load a full checkpoint into the running vLLM servers in
	// place; they keep serving model.name), command (run reload_command,
	// which must leave the servers serving it under $WHALE_MODEL_ID, e.g.
	// jobs/vllm/reload.sh) or none. Required for the command backend
	// unless rsft.lora (then vllm-lora).
	Reload        string `yaml:"reload" json:"reload"`
	ReloadCommand string `yaml:"reload_command" json:"reload_command"`
	// OnFailure is what a failed training does: stop (default: the run
	// stops, nothing of the step is committed, the next run retrains) or
	// skip (the step commits untrained, the base model carried forward,
	// the error in its summary, and the run goes on).
	OnFailure string `yaml:"on_failure" json:"on_failure,omitempty"`
	// Srun runs the command as `srun <srun_args> /bin/sh -c <command>`, for
	// a finetune job whose allocation holds the GPUs (whale submit slurm).
	Srun     bool     `yaml:"srun" json:"srun,omitempty"`
	SrunArgs []string `yaml:"srun_args" json:"srun_args,omitempty"`
}

// Budget bounds the run; any limit reached ends it. Zero means no limit.
type Budget struct {
	WeightSteps int     `yaml:"weight_steps" json:"weight_steps"`
	Epochs      float64 `yaml:"epochs" json:"epochs"`
	// Rollouts counts target-model rollouts (2,048 per default RSFT step,
	// 256 per candidate scored on the default search set).
	Rollouts int64 `yaml:"rollouts" json:"rollouts"`
	// HarnessIterations bounds harness search for harness-only and
	// stagewise schedules.
	HarnessIterations int `yaml:"harness_iterations" json:"harness_iterations"`
}

// Eval is the test evaluation.
type Eval struct {
	// K samples per test question: mean@K and pass@K (default 8).
	K              int  `yaml:"k" json:"k"`
	TestEveryPhase bool `yaml:"test_every_phase" json:"test_every_phase"`
}

// Rollout is how rollout stages spread their work.
type Rollout struct {
	// Shards is the number of parts a rollout stage runs as (Slurm array).
	Shards int `yaml:"shards" json:"shards"`
	// Concurrency is episodes in flight per shard; default
	// model.concurrency × number of endpoints.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
}

// Tools are the outside services a domain's tools reach. The episode loop
// calls them; harness code never does.
type Tools struct {
	// Retriever serves search QA's search tool: an http(s) base URL of a
	// server with the Search-R1 API (POST /retrieve), or "index:NAME" for a
	// BM25 index that `whale index build` stored under indexes/NAME in the
	// run's root. Required for searchqa.
	Retriever string `yaml:"retriever" json:"retriever"`
	// RetrieverAPIKeyEnv names the environment variable holding the token
	// of a retriever server that wants one (whale index serve with
	// WHALE_SERVE_TOKEN, or --token-env): whale sends it as
	// "Authorization: Bearer TOKEN". Default none; the token itself never
	// appears in a spec. Left out of run.json when empty, so that the
	// digests of runs frozen before it stay as they were.
	RetrieverAPIKeyEnv string `yaml:"retriever_api_key_env" json:"retriever_api_key_env,omitempty"`
	// Sandbox runs math's python tool: "local" (a python3 subprocess with
	// time and memory limits and no network; the default) or the http(s)
	// base URL of a SandboxFusion-compatible service (POST /run_code).
	Sandbox string `yaml:"sandbox" json:"sandbox"`
}

// Defaults returns the paper's settings. Fields that depend on the domain or
// on other fields are left empty for Normalize.
func Defaults() Experiment {
	return Experiment{
		Schedule: ScheduleWhale,
		Switch: Switch{
			Mode:  SwitchFixed,
			Fixed: FixedSwitch{Epochs: 0.6, Iterations: 6},
			Patience: PatienceSwitch{
				Window: 0.2, BurnIn: 0.2, Patience: 0.2,
				HarnessMin: 6, HarnessPatience: 2, HarnessCap: 15,
			},
		},
		Model: Model{
			Temperature: 1.0,
			TopK:        20,
			TopP:        1.0,
			MaxTokens:   8192,
			Concurrency: 16,
		},
		RSFT: RSFT{
			GroupSize: 8,
			BatchSize: 256,
			Threshold: 0.5,
			SFTEpochs: 1,
			LoRARank:  16,
			LoRAAlpha: 32,
		},
		Harness: Harness{
			Initial:                "h0",
			CandidatesPerIteration: 3,
			SearchSetSize:          256,
			SamplesPerCandidate:    1,
			LLM:                    LLMProposer{Temperature: 1.0, MaxTokens: 16384},
		},
		Eval:    Eval{K: 8, TestEveryPhase: true},
		Rollout: Rollout{Shards: 1},
		Seed:    1,
	}
}

// Normalize fills the fields whose default depends on other fields and
// replaces nil lists and maps by empty ones, so that a spec read back from
// run.json has the same canonical form. Fields whose zero value is
// meaningful (temperature 0, prompt_only false) are left alone: start from
// Defaults to get the paper's values. Normalize is idempotent.
func (e *Experiment) Normalize() {
	dom, _ := registry.Get(e.Domain) // zero for an unknown domain, which validation reports
	if e.Schedule == "" {
		e.Schedule = ScheduleWhale
	}
	if e.Switch.Mode == "" {
		e.Switch.Mode = SwitchFixed
	}
	if s, _ := schedules.Get(e.Schedule); s.PromptOnly {
		// FST is defined by prompt-only search; a spec that says otherwise
		// would not be FST.
		e.Harness.PromptOnly = true
	}
	if e.Model.Provider == "" {
		if dom.Local && len(e.Model.Endpoints) == 0 {
			e.Model.Provider = ProviderLocal
		} else {
			e.Model.Provider = ProviderOpenAI
		}
	}
	if e.Model.Checkpoint == "" {
		e.Model.Checkpoint = e.Model.Name
	}
	if e.RSFT.LearningRate == 0 {
		e.RSFT.LearningRate = dom.LearningRate
	}
	if e.Harness.Proposer == "" {
		if dom.Local {
			e.Harness.Proposer = ProposerMutate
		} else {
			e.Harness.Proposer = ProposerAgent
		}
	}
	if e.Finetune.Backend == "" {
		if e.Model.Provider == ProviderLocal {
			e.Finetune.Backend = FinetuneLocal
		} else {
			e.Finetune.Backend = FinetuneCommand
		}
	}
	if e.Finetune.Reload == "" {
		switch {
		case e.Finetune.Backend == FinetuneLocal:
			// The built-in server loads each new checkpoint next to the base,
			// under its model id, as vLLM loads LoRA adapters.
			e.Finetune.Reload = ReloadVLLMLoRA
		case e.RSFT.LoRA:
			e.Finetune.Reload = ReloadVLLMLoRA
		}
	}
	if e.Finetune.OnFailure == "" {
		e.Finetune.OnFailure = OnFailureStop
	}
	if e.Slurm.Stages == nil {
		e.Slurm.Stages = map[string]SlurmResources{}
	}
	if dom.Needs(registry.ToolSandbox) && e.Tools.Sandbox == "" {
		e.Tools.Sandbox = SandboxLocal
	}
	if e.Rollout.Concurrency == 0 {
		// Bounded by validation's maximum: many endpoints at a high
		// concurrency each must not make a default that is an error.
		c := e.Model.Concurrency // validation reports a bad one
		if c > 0 {
			c = min(min(c, MaxRolloutConcurrency)*min(max(1, len(e.Model.Endpoints)), MaxRolloutConcurrency), MaxRolloutConcurrency)
		}
		e.Rollout.Concurrency = c
	}
	if e.Model.Endpoints == nil {
		e.Model.Endpoints = []string{}
	}
	if e.Model.Extra == nil {
		e.Model.Extra = map[string]any{}
	}
	if e.Harness.LLM.Endpoints == nil {
		e.Harness.LLM.Endpoints = []string{}
	}
	if e.Finetune.Env == nil {
		e.Finetune.Env = map[string]string{}
	}
}

// HasWeightPhases reports whether the schedule trains the model (an
// unknown schedule, which validation reports, counts as both).
func (e *Experiment) HasWeightPhases() bool {
	s, ok := schedules.Get(e.Schedule)
	return !ok || s.Weights
}

// HasHarnessPhases reports whether the schedule searches harnesses.
func (e *Experiment) HasHarnessPhases() bool {
	s, ok := schedules.Get(e.Schedule)
	return !ok || s.Harness
}

// Alternates reports whether weight and harness phases take turns, so
// that the switch block applies.
func (e *Experiment) Alternates() bool {
	s, _ := schedules.Get(e.Schedule)
	return s.Alternates
}

// Clone returns a deep copy: lists and maps (including the values inside
// Model.Extra) are copied, so normalizing or editing the copy leaves e alone.
func (e *Experiment) Clone() *Experiment {
	c := deepCopy(reflect.ValueOf(e).Elem()).Interface().(Experiment)
	return &c
}

// deepCopy copies v recursively, so fields added later are covered without
// touching Clone.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			if c.Field(i).CanSet() {
				c.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(deepCopy(v.Index(i)))
		}
		return c
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			c.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return c
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(deepCopy(v.Elem()))
		return c
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(deepCopy(v.Elem()))
		return c
	default:
		return v
	}
}
