package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/localserve"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/storage"
)

// Runtime is what stages run with but do not hash: the domain with its
// tools, the target model's client and the proposer's. Build it with
// NewRuntime, or set the fields directly (tests); Close releases what
// NewRuntime opened.
type Runtime struct {
	Domain episode.Domain
	Model  episode.Chatter
	// Proposer is the chat model of a proposer that asks one (llm, see
	// propose.UsesLLM), from harness.llm; nil for the others.
	Proposer episode.Chatter
	// ModelEndpoints, when set, replace model.endpoints as the servers the
	// finetune stage hands new checkpoints to: NewRuntime sets it to the
	// in-process server of provider local.
	ModelEndpoints []string
	// WorkDir, when set, is where the finetune stage makes its work
	// directories: with provider local a private directory of this
	// process, the only one its in-process server loads adapters from.
	WorkDir string
	// CacheDir is RuntimeOptions.CacheDir (retrieval indexes), hidden
	// from a coding agent; "" for the default, which propose hides too.
	CacheDir string
	closers  []func() error
}

// Close releases the tools NewRuntime opened.
func (rt *Runtime) Close() error {
	var errs []error
	for i := len(rt.closers) - 1; i >= 0; i-- {
		errs = append(errs, rt.closers[i]())
	}
	rt.closers = nil
	return errors.Join(errs...)
}

// EndpointsEnv, when set, replaces model.endpoints of the experiment with
// a comma-separated list of base URLs for this process.
const EndpointsEnv = "WHALE_MODEL_ENDPOINTS"

// RuntimeOptions tune NewRuntime.
type RuntimeOptions struct {
	// CacheDir holds downloaded retrieval indexes; default the user cache dir.
	CacheDir string
	Log      *slog.Logger
	// Run, with provider local, lets the in-process server load on first
	// use the checkpoint a committed finetune stage of this run made, by
	// its model id: after a restart the server holds only the base while
	// the plan names the latest fine-tuned model.
	Run string
	// Inputs are the run's files outside the bucket as init recorded them
	// (spec.Run.Inputs): with provider local, a checkpoint this machine
	// does not have at its path is read from init's copy in the bucket.
	Inputs []spec.Input
}

// NewRuntime builds the runtime of exp: the domain wired to the tools in
// exp.Tools (a retriever server or a stored index, a local or remote code
// sandbox) and clients of the target and proposer models. Nothing is
// called yet except the download of a stored index.
func NewRuntime(ctx context.Context, s *storage.Store, exp *spec.Experiment, o RuntimeOptions) (_ *Runtime, err error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	rt := &Runtime{CacheDir: o.CacheDir}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	var res registry.Resources
	if r := exp.Tools.Retriever; r != "" {
		if name, ok := strings.CutPrefix(r, spec.RetrieverIndexPrefix); ok {
			idx, err := searchqa.OpenStored(ctx, s, name, o.CacheDir)
			if err != nil {
				return nil, fmt.Errorf("tools.retriever %s: %w", r, err)
			}
			rt.closers = append(rt.closers, idx.Close)
			res.Retriever = idx
		} else {
			// The token, when the server wants one, comes from the
			// variable tools.retriever_api_key_env names.
			c, err := searchqa.NewClient(r, searchqa.ClientOptions{Logger: log, APIKeyEnv: exp.Tools.RetrieverAPIKeyEnv})
			if err != nil {
				return nil, fmt.Errorf("tools.retriever: %w", err)
			}
			res.Retriever = c
		}
	}
	switch sb := exp.Tools.Sandbox; {
	case sb == spec.SandboxLocal:
		lp, err := mathdomain.NewLocalPython(ctx, mathdomain.LocalPythonOptions{Log: log})
		if err != nil {
			return nil, fmt.Errorf("tools.sandbox local: %w", err)
		}
		res.CodeRunner = lp
	case sb != "":
		sf, err := mathdomain.NewSandboxFusion(mathdomain.SandboxFusionOptions{URL: sb, Log: log})
		if err != nil {
			return nil, fmt.Errorf("tools.sandbox: %w", err)
		}
		res.CodeRunner = sf
	}
	if rt.Domain, err = registry.Lookup(exp.Domain, res); err != nil {
		return nil, err
	}
	switch exp.Model.Provider {
	case spec.ProviderOpenAI:
		m := exp.Model
		if env := os.Getenv(EndpointsEnv); env != "" {
			// A job that starts its own server (a vLLM per Slurm array
			// task) points the run's stages at it; endpoints are how a
			// stage runs, not what it computes, so identities stay.
			m.Endpoints = strings.Split(env, ",")
			rt.ModelEndpoints = m.Endpoints
		}
		if rt.Model, err = openAIClient(m, log); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	case spec.ProviderLocal:
		// Every episode in flight may have a call at the server: it must
		// not answer the rollout stage's own concurrency with 429s.
		inFlight := max(256, exp.Rollout.Concurrency+8)
		if err := rt.startLocal(ctx, s, exp.Model, inFlight, o.Inputs, log, runResolver(s, o.Run)); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	default:
		return nil, fmt.Errorf("model.provider %s: not available in this build of whale", exp.Model.Provider)
	}
	if exp.HasHarnessPhases() && propose.UsesLLM(exp.Harness.Proposer) {
		p := exp.Harness.LLM
		c, err := models.New(models.Config{
			Endpoints: p.Endpoints, Model: p.Name, APIKeyEnv: p.APIKeyEnv, Logger: log,
			Sampling: models.Sampling{Temperature: models.Ptr(p.Temperature), MaxTokens: models.Ptr(int64(p.MaxTokens))},
		})
		if err != nil {
			return nil, fmt.Errorf("harness.llm: %w", err)
		}
		rt.Proposer = c
	}
	return rt, nil
}

// startLocal serves the built-in model in this process: model.checkpoint
// is the path of a models/local checkpoint file (or a directory holding
// one), served as model.name on a loopback port; the client and the
// finetune stage's reload talk to it over HTTP as they would to vLLM.
func (rt *Runtime) startLocal(ctx context.Context, s *storage.Store, m spec.Model, inFlight int, inputs []spec.Input, log *slog.Logger, resolve func(context.Context, string) (*local.Model, string, error)) error {
	base, err := loadLocalBase(ctx, s, m.Checkpoint, inputs, log)
	if err != nil {
		return fmt.Errorf("provider local, checkpoint %s: %w", m.Checkpoint, err)
	}
	// The finetune stage's vllm-lora hand-off sends its output directory,
	// made under rt.WorkDir: a directory of this process's own (mode
	// 0700), the one the server may load adapters from, so that nothing
	// another user leaves in the system's temporary directory is loaded.
	work, err := os.MkdirTemp("", "whale-finetune-")
	if err != nil {
		return fmt.Errorf("provider local: a work directory for fine-tuning: %w", err)
	}
	rt.WorkDir = work
	rt.closers = append(rt.closers, func() error { return os.RemoveAll(work) })
	srv, err := localserve.New(base, localserve.Options{Name: m.Name, Root: m.Checkpoint, Log: log, Resolve: resolve,
		AdapterDir: work, MaxInFlight: inFlight})
	if err != nil {
		return err
	}
	h, err := localserve.Listen("127.0.0.1:0", srv)
	if err != nil {
		srv.Close()
		return err
	}
	rt.closers = append(rt.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return h.Shutdown(ctx)
	})
	log.Info("model: serving the local checkpoint", "checkpoint", m.Checkpoint, "name", m.Name, "url", h.URL, "digest", base.Digest())
	m.Provider, m.Endpoints, m.APIKeyEnv = spec.ProviderOpenAI, []string{h.URL}, ""
	c, err := openAIClient(m, log)
	if err != nil {
		return err
	}
	rt.Model = c
	rt.ModelEndpoints = []string{h.URL}
	return nil
}

// runResolver finds the committed finetune stage of run whose model id is
// name (the latest position wins) and reads its local checkpoint from
// the bucket, checking size and sha256 against the checkpoint index.
func runResolver(s *storage.Store, run string) func(context.Context, string) (*local.Model, string, error) {
	if s == nil || run == "" {
		return nil
	}
	return func(ctx context.Context, name string) (*local.Model, string, error) {
		ms, err := storage.ListCommitted(ctx, s, run)
		if err != nil {
			return nil, "", fmt.Errorf("list run %s: %w", run, err)
		}
		var found *storage.Manifest
		for _, m := range ms {
			if id, _ := m.Summary[finetune.SumModelID].(string); m.Stage == StageFinetune && id == name {
				found = m
			}
		}
		if found == nil {
			return nil, "", nil
		}
		files := found.Table(finetune.TableIndex)
		if len(files) != 1 {
			return nil, "", fmt.Errorf("%s: %d checkpoint indexes, want 1", found.Key, len(files))
		}
		data, err := s.ReadAll(ctx, found.FileKey(files[0]))
		if err != nil {
			return nil, "", fmt.Errorf("read checkpoint index of %s: %w", found.Dir, err)
		}
		idx, err := finetune.DecodeIndex(data)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", found.FileKey(files[0]), err)
		}
		for _, f := range idx.Files {
			if f.Path != localserve.CheckpointFile {
				continue
			}
			b, err := s.ReadAll(ctx, f.Key)
			if err != nil {
				return nil, "", fmt.Errorf("read checkpoint %s: %w", f.Key, err)
			}
			if int64(len(b)) != f.Size || storage.DigestBytes(b) != f.SHA256 {
				return nil, "", fmt.Errorf("checkpoint %s: %d bytes %s, the index says %d bytes %s", f.Key, len(b), storage.DigestBytes(b), f.Size, f.SHA256)
			}
			m, err := local.DecodeCheckpoint(b)
			if err != nil {
				return nil, "", fmt.Errorf("checkpoint %s: %w", f.Key, err)
			}
			return m, f.Key, nil
		}
		return nil, "", fmt.Errorf("%s: model %s has no %s (not trained by the local backend?)", found.Dir, name, localserve.CheckpointFile)
	}
}

func openAIClient(m spec.Model, log *slog.Logger) (*models.Client, error) {
	cfg := models.Config{
		Endpoints:   m.Endpoints,
		Model:       m.Name,
		APIKeyEnv:   m.APIKeyEnv,
		Concurrency: m.Concurrency,
		Extra:       m.Extra,
		Logger:      log,
	}
	return models.New(cfg)
}

// loadLocalBase loads the built-in model's checkpoint from path or, where
// this machine does not have path (a job on another node), from the copy
// `whale init` made of it in the bucket, checked against its digest.
func loadLocalBase(ctx context.Context, s *storage.Store, path string, inputs []spec.Input, log *slog.Logger) (*local.Model, error) {
	base, err := localserve.LoadPath(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return base, err
	}
	for _, in := range inputs {
		if in.Field != "model.checkpoint" || in.Path != path || in.Kind != spec.InputCopied {
			continue
		}
		b, rerr := s.ReadAll(ctx, in.Key)
		if rerr != nil {
			return nil, fmt.Errorf("%w; its copy %s: %w", err, in.Key, rerr)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != in.Digest {
			return nil, fmt.Errorf("%w; its copy %s does not hash to %s", err, in.Key, in.Digest)
		}
		log.Info("model: this machine has no checkpoint at its path; using init's copy in the bucket", "path", path, "copy", in.Key)
		return local.DecodeCheckpoint(b)
	}
	return nil, err
}
