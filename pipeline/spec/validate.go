package spec

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/pipeline/schedule/schedules"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/storage"
)

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	envVarRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Bounds of the experiment's counts: far above any real experiment, low
// enough that a typo (an extra digit run, 1e9, 2^63-1) is an error at init
// rather than a run that allocates, spawns or waits without end.
const (
	// MaxGroupSize bounds rsft.group_size, the rollouts per prompt.
	MaxGroupSize = 1024
	// MaxBatchSize bounds rsft.batch_size, the prompts of a weight step.
	MaxBatchSize = 1 << 20
	// MaxSamples bounds eval.k and harness.samples_per_candidate.
	MaxSamples = 1024
	// MaxSFTEpochs bounds rsft.sft_epochs.
	MaxSFTEpochs = 1000
	// MaxLoRA bounds rsft.lora_rank and rsft.lora_alpha.
	MaxLoRA = 1 << 16
	// MaxTokens bounds model.max_tokens and harness.llm.max_tokens.
	MaxTokens = 1 << 21
	// MaxTopK bounds model.top_k (a vocabulary is under a million tokens).
	MaxTopK = 1 << 20
	// MaxConcurrency bounds model.concurrency, requests in flight per
	// endpoint.
	MaxConcurrency = 4096
	// MaxEndpoints bounds model.endpoints and harness.llm.endpoints.
	MaxEndpoints = 1024
	// MaxRolloutConcurrency bounds rollout.concurrency, episodes in flight
	// per shard; its default, model.concurrency × endpoints, is capped at it.
	MaxRolloutConcurrency = 1 << 16
	// MaxShards bounds rollout.shards (Slurm array tasks).
	MaxShards = 10000
	// MaxCandidates bounds harness.candidates_per_iteration.
	MaxCandidates = 1024
	// MaxSearchSetSize bounds harness.search_set_size.
	MaxSearchSetSize = 1 << 20
	// MaxIterations bounds the harness iterations of the switch rules.
	MaxIterations = 100000
	// MaxSteps bounds budget.weight_steps and budget.harness_iterations.
	MaxSteps = 1 << 20
	// MaxRollouts bounds budget.rollouts.
	MaxRollouts = 1 << 40
	// MaxSlurmGPUs, MaxSlurmCPUs and MaxShards bound slurm.*.gpus, cpus and
	// max_parallel.
	MaxSlurmGPUs = 1024
	MaxSlurmCPUs = 1 << 16
)

// reservedExtra are request fields whale sets itself; model.extra may not
// override them, or the spec would say one thing and the requests another.
var reservedExtra = []string{
	"model", "messages", "temperature", "top_p", "top_k", "max_tokens",
	"max_completion_tokens", "n", "stream", "seed",
}

// Validate checks a normalized Experiment. The error is an ErrorList with one
// entry per problem, each naming the field path and what was expected.
func (e *Experiment) Validate() error {
	return e.validate().err()
}

type checker struct{ errs ErrorList }

func (c *checker) add(path, format string, args ...any) {
	c.errs = append(c.errs, &Error{Path: path, Msg: fieldName(path) + ": " + fmt.Sprintf(format, args...)})
}

// addSensitive is add for values that may hold a secret.
func (c *checker) addSensitive(path, format string, args ...any) {
	c.add(path, format, args...)
	c.errs[len(c.errs)-1].sensitive = true
}

func (c *checker) oneOf(path, got string, allowed []string) {
	if slices.Contains(allowed, got) {
		return
	}
	if got == "" {
		c.add(path, "required, one of %s", strings.Join(allowed, ", "))
		return
	}
	c.add(path, "must be one of %s; got %q", strings.Join(allowed, ", "), got)
}

func (c *checker) atLeast(path string, got, least int64) {
	if got < least {
		c.add(path, "must be at least %d, got %d", least, got)
	}
}

// count checks a count against its bounds (see the Max constants).
func (c *checker) count(path string, got, least, most int64) {
	switch {
	case got < least:
		c.add(path, "must be at least %d, got %d", least, got)
	case got > most:
		c.add(path, "must be at most %d, got %d (allowed %d to %d)", most, got, least, most)
	}
}

func (c *checker) positive(path string, got float64) {
	if math.IsNaN(got) || math.IsInf(got, 0) || got <= 0 {
		c.add(path, "must be a number > 0, got %v", got)
	}
}

func (c *checker) within(path string, got, lo, hi float64) {
	if math.IsNaN(got) || got < lo || got > hi {
		c.add(path, "must be in [%v, %v], got %v", lo, hi, got)
	}
}

func (c *checker) required(path, got, what string) {
	if strings.TrimSpace(got) == "" {
		c.add(path, "required: %s", what)
	}
}

// endpoint checks an http(s) base URL. It never echoes a password.
func (c *checker) endpoint(path, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.addSensitive(path, "must be an http:// or https:// URL with a host, got %q", redact.URL(raw))
		return
	}
	if u.User != nil {
		c.addSensitive(path, "must not carry credentials (%s); name the key's environment variable in api_key_env", redact.URL(raw))
	}
}

func (c *checker) apiKeyEnv(path, got string) {
	if got != "" && !envVarRE.MatchString(got) {
		// Never echo the value: it may be the key itself.
		c.addSensitive(path, "must name an environment variable (e.g. OPENAI_API_KEY), not hold the key")
	}
}

// dataset checks a dataset reference: a path under the root or a URL.
func (c *checker) dataset(path, ref string) {
	if ref != strings.TrimSpace(ref) {
		c.add(path, "has leading or trailing spaces: %q", ref)
		return
	}
	if strings.Contains(ref, "://") {
		u, err := url.Parse(ref)
		if err != nil || u.Scheme == "" {
			c.addSensitive(path, "is not a valid URL: %q", redact.URL(ref))
			return
		}
		if _, hasPass := u.User.Password(); hasPass {
			c.addSensitive(path, "must not carry credentials (%s)", redact.URL(ref))
		}
	}
}

func (e *Experiment) validate() ErrorList {
	c := &checker{}
	if e.Name == "" {
		c.add("name", "required: lowercase letters, digits and '-'")
	} else if !nameRE.MatchString(e.Name) {
		c.add("name", "must be lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters; got %q", e.Name)
	}
	var domains []string
	for _, d := range registry.All() {
		domains = append(domains, d.Name)
	}
	c.oneOf("domain", e.Domain, domains)
	c.oneOf("schedule", e.Schedule, schedules.Names())
	weights, harness := e.HasWeightPhases(), e.HasHarnessPhases()

	e.validateSwitch(c)
	e.validateData(c, weights, harness)
	e.validateModel(c)
	if weights {
		r := e.RSFT
		c.count("rsft.group_size", int64(r.GroupSize), 1, MaxGroupSize)
		c.count("rsft.batch_size", int64(r.BatchSize), 1, MaxBatchSize)
		c.within("rsft.threshold", r.Threshold, 0, 1)
		c.positive("rsft.learning_rate", r.LearningRate)
		c.count("rsft.sft_epochs", int64(r.SFTEpochs), 1, MaxSFTEpochs)
		if r.LoRA {
			c.count("rsft.lora_rank", int64(r.LoRARank), 1, MaxLoRA)
			c.count("rsft.lora_alpha", int64(r.LoRAAlpha), 1, MaxLoRA)
		}
		e.validateFinetune(c)
	}
	if harness {
		e.validateHarness(c)
	}
	// Every schedule plays harness.initial, weights-only included.
	if e.Harness.Initial != "" {
		if _, _, err := e.BuiltinInitial(); err != nil {
			c.add("harness.initial", "%v", err)
		}
	}
	e.validateBudget(c, weights)
	c.count("eval.k", int64(e.Eval.K), 1, MaxSamples)
	e.validateTools(c)
	e.validateSlurm(c)
	c.count("rollout.shards", int64(e.Rollout.Shards), 1, MaxShards)
	c.count("rollout.concurrency", int64(e.Rollout.Concurrency), 1, MaxRolloutConcurrency)
	e.checkSecrets(c) // last: a field refused already is not refused twice
	return c.errs
}

func (e *Experiment) validateSwitch(c *checker) {
	if !e.Alternates() {
		// Only alternating schedules switch; the block is kept but unused.
		return
	}
	c.oneOf("switch.mode", e.Switch.Mode, Switches)
	switch e.Switch.Mode {
	case SwitchFixed:
		c.positive("switch.fixed.epochs", e.Switch.Fixed.Epochs)
		c.count("switch.fixed.iterations", int64(e.Switch.Fixed.Iterations), 1, MaxIterations)
	case SwitchPatience:
		p := e.Switch.Patience
		c.positive("switch.patience.window", p.Window)
		if math.IsNaN(p.BurnIn) || math.IsInf(p.BurnIn, 0) || p.BurnIn < 0 {
			c.add("switch.patience.burn_in", "must be a number >= 0, got %v", p.BurnIn)
		}
		c.positive("switch.patience.patience", p.Patience)
		c.count("switch.patience.harness_min", int64(p.HarnessMin), 1, MaxIterations)
		c.count("switch.patience.harness_patience", int64(p.HarnessPatience), 1, MaxIterations)
		if p.HarnessCap < p.HarnessMin {
			c.add("switch.patience.harness_cap", "must be at least harness_min (%d), got %d", p.HarnessMin, p.HarnessCap)
		}
	}
}

func (e *Experiment) validateData(c *checker, weights, harness bool) {
	if weights {
		c.required("data.train", e.Data.Train, "the training tasks the weight steps sample from")
	}
	if harness {
		c.required("data.search", e.Data.Search, "the harness search set D_harness")
	}
	if e.Eval.TestEveryPhase {
		c.required("data.test", e.Data.Test, "the test tasks (or set eval.test_every_phase: false)")
	}
	c.dataset("data.train", e.Data.Train)
	c.dataset("data.search", e.Data.Search)
	c.dataset("data.test", e.Data.Test)
}

func (e *Experiment) validateModel(c *checker) {
	m := e.Model
	c.oneOf("model.provider", m.Provider, Providers)
	if m.Provider == ProviderOpenAI {
		c.required("model.name", m.Name, "the model name the endpoints serve")
		if len(m.Endpoints) == 0 {
			c.add("model.endpoints", "required: at least one OpenAI-compatible base URL for provider openai")
		}
	}
	c.client("model", m.Endpoints, m.APIKeyEnv, m.Temperature)
	if m.TopK < -1 || m.TopK > MaxTopK {
		c.add("model.top_k", "must be -1 (disabled), 0 (disabled) or a count up to %d, got %d", MaxTopK, m.TopK)
	}
	if math.IsNaN(m.TopP) || m.TopP <= 0 || m.TopP > 1 {
		c.add("model.top_p", "must be in (0, 1], got %v", m.TopP)
	}
	c.count("model.max_tokens", int64(m.MaxTokens), 1, MaxTokens)
	c.count("model.concurrency", int64(m.Concurrency), 1, MaxConcurrency)
	if len(m.Stop) > 16 {
		c.add("model.stop", "at most 16 stop sequences, got %d", len(m.Stop))
	}
	for i, s := range m.Stop {
		if s == "" {
			c.add(fmt.Sprintf("model.stop[%d]", i), "must be a non-empty string")
		}
	}
	keys := make([]string, 0, len(m.Extra))
	for k := range m.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := joinPath("model.extra", k)
		if slices.Contains(reservedExtra, k) {
			c.add(path, "is set by whale; use the model field of that name instead of extra")
			continue
		}
		if p := nonFinite(m.Extra[k], path); p != "" {
			c.add(p, "must be a finite number")
		}
	}
}

// nonFinite returns the path of the first NaN or infinite number in v: such
// values cannot be sent as JSON.
func nonFinite(v any, path string) string {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return path
		}
	case float32:
		return nonFinite(float64(x), path)
	case []any:
		for i, item := range x {
			if p := nonFinite(item, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p := nonFinite(x[k], joinPath(path, k)); p != "" {
				return p
			}
		}
	}
	return ""
}

// finetuneChecks check the settings of each finetune backend that has
// any, by name; every name is one of finetune.Backends(). Adding a
// backend there adds its checks here, if it has settings.
var finetuneChecks = map[string]func(*Experiment, *checker){
	FinetuneCommand: (*Experiment).validateFinetuneCommand,
	FinetuneLocal:   (*Experiment).validateFinetuneLocal,
}

func (e *Experiment) validateFinetune(c *checker) {
	f := e.Finetune
	c.oneOf("finetune.backend", f.Backend, finetune.Backends())
	if check := finetuneChecks[f.Backend]; check != nil {
		check(e, c)
	}
	if f.Reload != "" {
		c.oneOf("finetune.reload", f.Reload, Reloads)
	}
	if check := reloadChecks[f.Reload]; check != nil {
		check(e, c)
	}
	c.oneOf("finetune.on_failure", f.OnFailure, []string{OnFailureStop, OnFailureSkip})
	if (f.Srun || len(f.SrunArgs) > 0) && f.Backend != FinetuneCommand {
		c.add("finetune.srun", "wraps the trainer command of backend command; backend is %q", f.Backend)
	}
	for k := range f.Env {
		if !envVarRE.MatchString(k) {
			c.add(joinPath("finetune.env", k), "is not a valid environment variable name")
		}
	}
}

// validateFinetuneCommand checks the command backend: an external
// trainer of a served model, whose new weights the server is told about.
func (e *Experiment) validateFinetuneCommand(c *checker) {
	f := e.Finetune
	c.required("finetune.command", f.Command, "the trainer command for backend command")
	if e.Model.Provider == ProviderLocal {
		c.add("finetune.backend", "must be local when model.provider is local (the built-in model trains in-process)")
	}
	if f.Reload == "" {
		c.add("finetune.reload", "required for backend command: vllm-lora (load LoRA adapters), vllm-weights (load a full checkpoint into the running vLLM servers), command (run reload_command) or none (the trainer command makes the server use the new weights itself)")
	}
}

// reloadChecks check what each reload mode (finetune.reload, one of
// Reloads) needs of the rest of the experiment, by name.
var reloadChecks = map[string]func(*Experiment, *checker){
	ReloadVLLMLoRA: func(e *Experiment, c *checker) {
		if e.Finetune.Backend == FinetuneCommand && !e.RSFT.LoRA {
			c.add("finetune.reload", "vllm-lora loads LoRA adapters; set rsft.lora: true, or for a full fine-tune choose vllm-weights, command or none")
		}
	},
	ReloadVLLMWeights: func(e *Experiment, c *checker) {
		switch {
		case e.Finetune.Backend != FinetuneCommand:
			c.add("finetune.reload", "vllm-weights loads a trainer's checkpoint into vLLM servers; backend %q serves its model itself (use vllm-lora)", e.Finetune.Backend)
		case e.RSFT.LoRA:
			c.add("finetune.reload", "vllm-weights loads a full checkpoint, but rsft.lora is true: load adapters with vllm-lora")
		case len(e.Model.Endpoints) == 0:
			c.add("finetune.reload", "vllm-weights needs model.endpoints: the vLLM servers to load the checkpoint into")
		}
	},
	ReloadCommand: func(e *Experiment, c *checker) {
		c.required("finetune.reload_command", e.Finetune.ReloadCommand, "the command that makes the inference servers serve the new checkpoint under $WHALE_MODEL_ID, e.g. jobs/vllm/reload.sh")
	},
}

// validateFinetuneLocal checks the local backend: it trains the built-in
// model, whose server loads any checkpoint as vllm-lora loads adapters.
func (e *Experiment) validateFinetuneLocal(c *checker) {
	if e.Model.Provider != ProviderLocal {
		c.add("finetune.backend", "local trains only the built-in model; model.provider is %q (use backend command)", e.Model.Provider)
	}
}

// proposerChecks check the settings of each proposer that has any, by
// name; every name is one of propose.Backends(). Adding a proposer there
// adds its checks here, if it has settings.
var proposerChecks = map[string]func(*Experiment, *checker){
	ProposerAgent: (*Experiment).validateAgentProposer,
	ProposerLLM:   (*Experiment).validateLLMProposer,
}

func (e *Experiment) validateHarness(c *checker) {
	h := e.Harness
	c.required("harness.initial", h.Initial, `the starting harness, e.g. "h0"`)
	c.count("harness.candidates_per_iteration", int64(h.CandidatesPerIteration), 1, MaxCandidates)
	c.count("harness.search_set_size", int64(h.SearchSetSize), 1, MaxSearchSetSize)
	c.count("harness.samples_per_candidate", int64(h.SamplesPerCandidate), 1, MaxSamples)
	c.oneOf("harness.proposer", h.Proposer, propose.Backends())
	if check := proposerChecks[h.Proposer]; check != nil {
		check(e, c)
	}
	if s, _ := schedules.Get(e.Schedule); s.PromptOnly && !h.PromptOnly {
		c.add("harness.prompt_only", "must be true for schedule %s", e.Schedule)
	}
}

// validateAgentProposer checks the agent proposer's settings.
func (e *Experiment) validateAgentProposer(c *checker) {
	c.required("harness.agent.command", e.Harness.Agent.Command, "the coding-agent command for proposer agent")
	for i, name := range e.Harness.Agent.Env {
		path := fmt.Sprintf("harness.agent.env[%d]", i)
		switch err := propose.CheckAgentEnv(name); {
		case err != nil && !envVarRE.MatchString(name):
			// Maybe the value, written where its name belongs.
			c.addSensitive(path, "%v", err)
		case err != nil:
			c.add(path, "%v", err)
		}
	}
}

// validateLLMProposer checks the llm proposer's settings: the model the
// pipeline opens a client of (see propose.UsesLLM).
func (e *Experiment) validateLLMProposer(c *checker) {
	p := e.Harness.LLM
	c.required("harness.llm.name", p.Name, "the proposer model name for proposer llm")
	if len(p.Endpoints) == 0 {
		c.add("harness.llm.endpoints", "required: at least one OpenAI-compatible base URL for proposer llm")
	}
	c.client("harness.llm", p.Endpoints, p.APIKeyEnv, p.Temperature)
	c.count("harness.llm.max_tokens", int64(p.MaxTokens), 1, MaxTokens)
}

func (e *Experiment) validateBudget(c *checker, weights bool) {
	b := e.Budget
	c.count("budget.weight_steps", int64(b.WeightSteps), 0, MaxSteps)
	if math.IsNaN(b.Epochs) || math.IsInf(b.Epochs, 0) || b.Epochs < 0 {
		c.add("budget.epochs", "must be a number >= 0, got %v", b.Epochs)
	}
	c.count("budget.rollouts", b.Rollouts, 0, MaxRollouts)
	c.count("budget.harness_iterations", int64(b.HarnessIterations), 0, MaxSteps)
	if weights && b.WeightSteps == 0 && b.Epochs == 0 && b.Rollouts == 0 {
		c.add("budget", "set at least one of weight_steps, epochs or rollouts for schedule %s", e.Schedule)
	}
	if !weights && b.HarnessIterations == 0 && b.Rollouts == 0 {
		c.add("budget", "set harness_iterations or rollouts for schedule %s", e.Schedule)
	}
	if s, _ := schedules.Get(e.Schedule); s.Weights && s.Harness && !s.Alternates && b.HarnessIterations == 0 {
		c.add("budget.harness_iterations", "required for schedule %s: the iterations of the harness stage after all weight training", e.Schedule)
	}
}

func (e *Experiment) validateTools(c *checker) {
	t := e.Tools
	if dom, err := registry.Get(e.Domain); err == nil && dom.Needs(registry.ToolRetriever) {
		switch {
		case t.Retriever == "":
			c.add("tools.retriever", "required for %s: the URL of a Search-R1 retrieval server, or index:NAME for an index built with `whale index build`", e.Domain)
		case strings.HasPrefix(t.Retriever, RetrieverIndexPrefix):
			if err := storage.CheckDataset(strings.TrimPrefix(t.Retriever, RetrieverIndexPrefix)); err != nil {
				c.add("tools.retriever", "index name: %v", err)
			}
		default:
			c.endpoint("tools.retriever", t.Retriever)
		}
	}
	c.apiKeyEnv("tools.retriever_api_key_env", t.RetrieverAPIKeyEnv)
	if t.RetrieverAPIKeyEnv != "" && envVarRE.MatchString(t.RetrieverAPIKeyEnv) && !strings.Contains(t.Retriever, "://") {
		c.add("tools.retriever_api_key_env", "is the token of a retriever server; tools.retriever is %q, not an http(s) URL", t.Retriever)
	}
	if t.Sandbox != "" && t.Sandbox != SandboxLocal {
		c.endpoint("tools.sandbox", t.Sandbox)
	}
}

// client checks the settings every OpenAI-compatible model has, under
// prefix (model, harness.llm): its endpoints, key variable, temperature.
func (c *checker) client(prefix string, endpoints []string, apiKeyEnv string, temperature float64) {
	if len(endpoints) > MaxEndpoints {
		c.add(prefix+".endpoints", "at most %d endpoints, got %d", MaxEndpoints, len(endpoints))
	}
	for i, ep := range endpoints {
		c.endpoint(fmt.Sprintf("%s.endpoints[%d]", prefix, i), ep)
	}
	c.apiKeyEnv(prefix+".api_key_env", apiKeyEnv)
	if math.IsNaN(temperature) || math.IsInf(temperature, 0) || temperature < 0 {
		c.add(prefix+".temperature", "must be a number >= 0, got %v", temperature)
	}
}
