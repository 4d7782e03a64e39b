package finetune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/whalerun/whale/stages"
)

// Name is the stage name.
const Name = "finetune"

// Reload modes: how the inference servers get the new checkpoint.
const (
	ReloadNone = "none"
	// ReloadVLLMLoRA loads the adapter under a name of its own (reload.go).
	ReloadVLLMLoRA = "vllm-lora"
	// ReloadVLLMWeights loads a full checkpoint into the running servers
	// in place, under their served name (reload_weights.go).
	ReloadVLLMWeights = "vllm-weights"
	ReloadCommand     = "command"
)

// What a failed training does (Config.OnFailure).
const (
	OnFailureStop = "stop"
	OnFailureSkip = "skip"
)

// Config is the hashed configuration of a finetune stage. Everything in it
// is recorded in the stage's _INPUTS.json and manifest: put no secrets in
// Env (the trainer inherits whale's own environment, which is where
// credentials belong).
//
// The trainer command sees, on top of whale's environment and Env:
//
//	WHALE_SFT_PARQUET      a directory holding the SFT table's Parquet files
//	                       (part-00000.parquet, part-00001.parquet, …)
//	WHALE_SFT_JSONL        the same rows as chat-messages JSON lines:
//	                       {"messages":[{"role","content",…}],"train_mask":[…],
//	                        "example_id","episode_id","task_id"}
//	WHALE_SFT_EXAMPLES     the number of rows
//	WHALE_BASE_CHECKPOINT  a local directory (a base downloaded from the
//	                       bucket) or the configured string (hub name, path)
//	WHALE_BASE_MODEL       Config.BaseCheckpoint: the original base model,
//	                       which a LoRA adapter in WHALE_BASE_CHECKPOINT
//	                       applies to
//	WHALE_OUTPUT_DIR       an empty directory for the new checkpoint
//	WHALE_MODEL_ID         the id the checkpoint will get unless the trainer
//	                       writes another to $WHALE_OUTPUT_DIR/whale_model_id:
//	                       "<ModelName>@<run>/<position>", and with reload
//	                       vllm-lora "-a<attempt>-<8 hex>" after it
//	WHALE_LEARNING_RATE, WHALE_EPOCHS, WHALE_LORA (1 or 0), WHALE_LORA_RANK,
//	WHALE_LORA_ALPHA, WHALE_TRAIN_REASONING (1, or 0 with MaskReasoning),
//	WHALE_SEED, WHALE_RUN, WHALE_POSITION, WHALE_ATTEMPT
//	WHALE_RESUME_DIR       a directory for the trainer's own mid-training
//	                       checkpoints that outlives a failed attempt (the
//	                       work directory does not), so that the next
//	                       attempt at the position resumes; removed once
//	                       training succeeds
type Config struct {
	// Backend is a name of the table of backends (see Backends): "command"
	// (the default when empty) or "local" (whale's built-in model, trained
	// in-process: see local.go).
	Backend string `json:"backend"`
	// Command is run with /bin/sh -c in whale's working directory, so that
	// relative paths in it (jobs/trainers/train_sft.py) mean what they
	// mean to the user; every WHALE_* path is absolute.
	Command string            `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	// Srun runs the command as `srun <SrunArgs…> /bin/sh -c <Command>`,
	// inside an allocation (an sbatch job) that holds the GPUs.
	Srun     bool     `json:"srun,omitempty"`
	SrunArgs []string `json:"srun_args,omitempty"`

	// BaseCheckpoint is the initial weights (a hub name or a path), used
	// when the stage has no "base" input.
	BaseCheckpoint string `json:"base_checkpoint"`
	// ModelName is the served base model's name; new checkpoints are called
	// "<ModelName>@<run>/<position>" (see WHALE_MODEL_ID). With reload
	// vllm-weights it is the name the servers keep serving.
	ModelName string `json:"model_name"`

	LearningRate float64 `json:"learning_rate"`
	Epochs       int     `json:"epochs"`
	LoRA         bool    `json:"lora"`
	LoRARank     int     `json:"lora_rank"`
	LoRAAlpha    int     `json:"lora_alpha"`
	// MaskReasoning tells the trainer to leave the reasoning of assistant
	// messages out of the loss (WHALE_TRAIN_REASONING=0).
	MaskReasoning bool `json:"mask_reasoning,omitempty"`

	// Reload is none (or empty), vllm-lora, vllm-weights or command.
	Reload        string `json:"reload"`
	ReloadCommand string `json:"reload_command,omitempty"`
	// OnFailure is what a failed training does: "stop" (or empty: the
	// stage fails, nothing is committed, a rerun trains again) or "skip"
	// (the step commits untrained, the base carried forward as for an
	// empty SFT table, and the trainer's error in the summary).
	OnFailure string `json:"on_failure,omitempty"`
	// LoRAPath is the lora_path sent to vLLM, a template over {output_dir},
	// {run}, {position}, {attempt} and {model_id}; default "{output_dir}",
	// which only works when the server sees this machine's files (set
	// Stage.WorkDir to a shared filesystem).
	LoRAPath string `json:"lora_path,omitempty"`
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are the variables the stage sets for the trainer and the
// reload command; Env may set any other (e.g. a trainer's own
// WHALE_BATCH_SIZE).
var reservedEnv = map[string]bool{
	"WHALE_SFT_PARQUET": true, "WHALE_SFT_JSONL": true, "WHALE_SFT_EXAMPLES": true,
	"WHALE_BASE_CHECKPOINT": true, "WHALE_BASE_MODEL": true, "WHALE_OUTPUT_DIR": true,
	"WHALE_MODEL_ID": true, "WHALE_LEARNING_RATE": true, "WHALE_EPOCHS": true,
	"WHALE_LORA": true, "WHALE_LORA_RANK": true, "WHALE_LORA_ALPHA": true, "WHALE_TRAIN_REASONING": true,
	"WHALE_SEED": true, "WHALE_RUN": true, "WHALE_POSITION": true, "WHALE_ATTEMPT": true,
	"WHALE_CHECKPOINT_DIR": true, "WHALE_RESUME_DIR": true,
}

// Validate checks the configuration before anything runs.
func (c Config) Validate() error {
	var errs []error
	switch c.OnFailure {
	case "", OnFailureStop, OnFailureSkip:
	default:
		errs = append(errs, fmt.Errorf("on_failure %q: want %q or %q", c.OnFailure, OnFailureStop, OnFailureSkip))
	}
	if b, err := backendFor(c.Backend); err != nil {
		errs = append(errs, err)
	} else if b.check != nil {
		errs = append(errs, b.check(c)...)
	}
	for k := range c.Env {
		if !envKeyRE.MatchString(k) {
			errs = append(errs, fmt.Errorf("env %q: not a valid variable name", k))
		} else if reservedEnv[k] {
			errs = append(errs, fmt.Errorf("env %q: set by the stage", k))
		}
	}
	if c.BaseCheckpoint == "" {
		errs = append(errs, errors.New("base_checkpoint is empty: give the initial weights (a hub name or a path)"))
	}
	if !(c.LearningRate > 0) {
		errs = append(errs, fmt.Errorf("learning_rate %v: want > 0", c.LearningRate))
	}
	if c.Epochs < 1 {
		errs = append(errs, fmt.Errorf("epochs %d: want ≥ 1", c.Epochs))
	}
	if c.LoRA && (c.LoRARank < 1 || c.LoRAAlpha < 1) {
		errs = append(errs, fmt.Errorf("lora_rank %d, lora_alpha %d: want ≥ 1 with lora", c.LoRARank, c.LoRAAlpha))
	}
	switch c.Reload {
	case "", ReloadNone, ReloadVLLMLoRA:
	case ReloadVLLMWeights:
		if c.LoRA {
			errs = append(errs, errors.New("reload vllm-weights loads a full checkpoint, but lora is set: a LoRA adapter is loaded with vllm-lora"))
		}
		if c.ModelName == "" {
			errs = append(errs, errors.New("reload vllm-weights needs model_name: the name the servers serve (--served-model-name), which rollouts keep requesting"))
		}
	case ReloadCommand:
		if strings.TrimSpace(c.ReloadCommand) == "" {
			errs = append(errs, errors.New("reload is command but reload_command is empty"))
		}
	default:
		errs = append(errs, fmt.Errorf("reload %q: want none, vllm-lora, vllm-weights or command", c.Reload))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("finetune config: %w", err)
	}
	return nil
}

// Stage is the finetune stage. Its fields are runtime settings, not part of
// the stage's identity.
type Stage struct {
	Log *slog.Logger // nil: the Exec's logger
	// Stdout receives the trainer's (and reload command's) output, line by
	// line, e.g. os.Stderr for a user watching; nil discards it (it is
	// logged either way).
	Stdout io.Writer
	// WorkDir is where the per-execution work directory is made; "" means
	// os.TempDir(). With vllm-lora and the default lora path the output
	// directory is left there for the server, so WorkDir should then be on a
	// filesystem the server shares.
	WorkDir string
	// ReloadEndpoints are the OpenAI-compatible base URLs (http://host:8000/v1
	// or http://host:8000) that vllm-lora tells about a new adapter.
	ReloadEndpoints []string
	// CommandDir is where the trainer and reload commands run (a run's
	// spec.Run.Dir); empty, or missing on this machine (logged), the
	// current directory.
	CommandDir string
	// APIKey, when set, is sent as a bearer token to ReloadEndpoints.
	APIKey string
	// HTTPClient sends the reload calls; nil: a default client. Each try
	// of a call is bounded: 5 minutes, reload_weights WeightsLoadTimeout.
	HTTPClient *http.Client
	// KillGrace is how long a cancelled trainer gets between SIGTERM and
	// SIGKILL of its process group; 0 means 10 s.
	KillGrace time.Duration
}

// Name implements stages.Stage.
func (*Stage) Name() string { return Name }

// Summary keys written to the manifest.
const (
	SumTrained           = "trained"
	SumExamples          = "examples"
	SumAssistantMessages = "assistant_messages"
	SumModelID           = "model_id"
	SumCheckpointFiles   = "checkpoint_files"
	SumCheckpointBytes   = "checkpoint_bytes"
	SumTrainerSeconds    = "trainer_seconds"
	SumReloaded          = "reloaded"
	// SumTrainerError is set when on_failure skip committed a step whose
	// training failed.
	SumTrainerError = "trainer_error"
)

// Run implements stages.Stage.
func (st *Stage) Run(ctx context.Context, x *stages.Exec) error {
	var cfg Config
	if err := x.DecodeConfig(&cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if x.Shards != 1 {
		return fmt.Errorf("finetune: runs as one shard, not %d", x.Shards)
	}
	log := st.Log
	if log == nil {
		log = x.Log
	}
	b, err := backendFor(cfg.Backend)
	if err != nil {
		return err // Validate has said so
	}
	sft, err := x.Input("sft")
	if err != nil {
		return err
	}
	base, err := st.resolveBase(ctx, x, cfg)
	if err != nil {
		return err
	}

	work, err := st.makeWorkDir(x)
	if err != nil {
		return err
	}
	keepOutput := false
	defer func() {
		if keepOutput {
			for _, d := range []string{"sft", "sft.jsonl", "base"} {
				os.RemoveAll(filepath.Join(work, d))
			}
			return
		}
		os.RemoveAll(work)
	}()

	sftDir := filepath.Join(work, "sft")
	jsonlPath := filepath.Join(work, "sft.jsonl")
	counts, err := materializeSFT(ctx, x, sft, sftDir, jsonlPath)
	if err != nil {
		return err
	}
	x.SetSummary(SumExamples, counts.Examples)
	x.SetSummary(SumAssistantMessages, counts.Assistant)

	carry := func(secs float64) error {
		idx := base.carried()
		if err := writeIndex(ctx, x, idx); err != nil {
			return err
		}
		x.SetSummary(SumTrained, false)
		x.SetSummary(SumModelID, idx.ModelID)
		x.SetSummary(SumCheckpointFiles, len(idx.Files))
		x.SetSummary(SumCheckpointBytes, idx.bytes())
		x.SetSummary(SumTrainerSeconds, secs)
		x.SetSummary(SumReloaded, 0)
		return nil
	}
	if counts.Examples == 0 {
		log.Info("finetune: the SFT table is empty; the update is skipped and the base carried forward", "model_id", base.ModelID)
		return carry(0)
	}

	baseArg := base.Checkpoint
	if len(base.Files) > 0 {
		baseArg = filepath.Join(work, "base")
		if err := downloadCheckpoint(ctx, x, base.Files, baseArg); err != nil {
			return err
		}
	}
	outDir := filepath.Join(work, "output")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	modelID := defaultModelID(cfg, x)
	if cfg.Reload == ReloadVLLMLoRA {
		if modelID, err = loraModelID(cfg, x); err != nil {
			return err
		}
	}
	// generated is the id made for this execution; the backend or the
	// trainer may name the checkpoint otherwise (loadLoRA).
	generated := modelID
	env := map[string]string{
		"WHALE_SFT_PARQUET":     sftDir,
		"WHALE_SFT_JSONL":       jsonlPath,
		"WHALE_SFT_EXAMPLES":    strconv.FormatInt(counts.Examples, 10),
		"WHALE_BASE_CHECKPOINT": baseArg,
		"WHALE_BASE_MODEL":      cfg.BaseCheckpoint,
		"WHALE_OUTPUT_DIR":      outDir,
		"WHALE_MODEL_ID":        modelID,
		"WHALE_LEARNING_RATE":   strconv.FormatFloat(cfg.LearningRate, 'g', -1, 64),
		"WHALE_EPOCHS":          strconv.Itoa(cfg.Epochs),
		"WHALE_LORA":            boolEnv(cfg.LoRA),
		"WHALE_TRAIN_REASONING": boolEnv(!cfg.MaskReasoning),
		"WHALE_LORA_RANK":       strconv.Itoa(cfg.LoRARank),
		"WHALE_LORA_ALPHA":      strconv.Itoa(cfg.LoRAAlpha),
		"WHALE_SEED":            strconv.FormatInt(x.Seed, 10),
		"WHALE_RUN":             x.Run,
		"WHALE_POSITION":        x.Position,
		"WHALE_ATTEMPT":         strconv.Itoa(x.Attempt),
	}
	resumeDir, err := st.makeResumeDir(x)
	if err != nil {
		return err
	}
	env["WHALE_RESUME_DIR"] = resumeDir
	start := time.Now()
	modelID, err = b.train(st, ctx, &job{log: log, x: x, cfg: cfg, examples: counts.Examples,
		sftDir: sftDir, base: baseArg, outDir: outDir, modelID: modelID, env: env})
	secs := time.Since(start).Seconds()
	var files []string
	if err == nil {
		files, err = listOutput(outDir)
	}
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("finetune: trainer wrote nothing to $WHALE_OUTPUT_DIR (%s); it must save the checkpoint there", outDir)
	}
	if err != nil {
		if cfg.OnFailure != OnFailureSkip || ctx.Err() != nil {
			return err // the resume directory stays for the next attempt
		}
		os.RemoveAll(resumeDir)
		log.Warn("finetune: training failed; on_failure skip commits the step untrained with the base carried forward",
			"err", err, "model_id", base.ModelID)
		x.SetSummary(SumTrainerError, err.Error())
		return carry(secs)
	}
	// Trained: what the trainer kept to resume from is of no more use.
	os.RemoveAll(resumeDir)
	if id, ok, err := readModelID(outDir); err != nil {
		return err
	} else if ok {
		modelID = id
	}

	idx := Index{Format: IndexFormat, ModelID: modelID, Trained: true, LoRA: cfg.LoRA, BaseModel: cfg.BaseCheckpoint, Base: base.ref()}
	if idx.Files, err = uploadCheckpoint(ctx, x, outDir, files); err != nil {
		return err
	}
	if err := writeIndex(ctx, x, idx); err != nil {
		return err
	}
	log.Info("finetune: checkpoint uploaded", "model_id", modelID, "files", len(idx.Files), "bytes", idx.bytes(), "trainer_seconds", secs)

	reloaded := 0
	switch cfg.Reload {
	case ReloadVLLMLoRA:
		loraPath := expandLoRAPath(cfg.LoRAPath, outDir, x, modelID)
		if reloaded, err = st.loadLoRA(ctx, log, modelID, loraPath, defaultModelID(cfg, x)+"-a", modelID == generated); err != nil {
			return err
		}
		// The server reads the adapter again when its LoRA cache evicts
		// it, so a path into the output directory must stay valid.
		keepOutput = cfg.LoRAPath == "" || strings.Contains(cfg.LoRAPath, "{output_dir}")
		if keepOutput {
			log.Info("finetune: the adapter directory stays for the inference server", "dir", outDir)
		}
	case ReloadVLLMWeights:
		// The servers read the directory during the call, so it need not
		// outlive the stage; it must be on a filesystem they share
		// (Stage.WorkDir).
		if reloaded, err = st.reloadWeights(ctx, log, cfg.ModelName, outDir); err != nil {
			return err
		}
	case ReloadCommand:
		renv := map[string]string{
			"WHALE_CHECKPOINT_DIR": outDir,
			"WHALE_MODEL_ID":       modelID,
			"WHALE_RUN":            x.Run,
			"WHALE_POSITION":       x.Position,
			"WHALE_ATTEMPT":        strconv.Itoa(x.Attempt),
		}
		if err := st.runCommand(ctx, log, "reload command", []string{"/bin/sh", "-c", cfg.ReloadCommand}, environ(cfg.Env, renv)); err != nil {
			return err
		}
		reloaded = 1
	}
	x.SetSummary(SumTrained, true)
	x.SetSummary(SumModelID, modelID)
	x.SetSummary(SumCheckpointFiles, len(idx.Files))
	x.SetSummary(SumCheckpointBytes, idx.bytes())
	x.SetSummary(SumTrainerSeconds, secs)
	x.SetSummary(SumReloaded, reloaded)
	return nil
}

func defaultModelID(cfg Config, x *stages.Exec) string {
	name := cfg.ModelName
	if name == "" {
		name = cfg.BaseCheckpoint
	}
	return fmt.Sprintf("%s@%s/%s", name, x.Run, x.Position)
}

func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// environ is whale's environment, then the configured Env, then the
// stage's WHALE_* variables; exec keeps the last of duplicate keys.
func environ(cfgEnv, whale map[string]string) []string {
	env := os.Environ()
	for _, m := range []map[string]string{cfgEnv, whale} {
		for k, v := range m {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (st *Stage) makeWorkDir(x *stages.Exec) (string, error) {
	parent := st.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("finetune: work dir: %w", err)
	}
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("whale-finetune-%s-%s-a%d-*", x.Run, x.Position, x.Attempt))
	if err != nil {
		return "", fmt.Errorf("finetune: work dir: %w", err)
	}
	return dir, nil
}

// makeResumeDir makes (or finds, on a later attempt) the position's
// resume directory next to the work directories: named by run and
// position, not attempt, so an attempt finds what a failed one left. The
// trainer checks that what it finds was made from the same inputs.
func (st *Stage) makeResumeDir(x *stages.Exec) (string, error) {
	parent := st.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	dir := filepath.Join(parent, fmt.Sprintf("whale-finetune-resume-%s-%s", x.Run, x.Position))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("finetune: resume dir: %w", err)
	}
	return dir, nil
}

func expandLoRAPath(tmpl, outDir string, x *stages.Exec, modelID string) string {
	if tmpl == "" {
		return outDir
	}
	return strings.NewReplacer(
		"{output_dir}", outDir,
		"{run}", x.Run,
		"{position}", x.Position,
		"{attempt}", strconv.Itoa(x.Attempt),
		"{model_id}", modelID,
	).Replace(tmpl)
}
