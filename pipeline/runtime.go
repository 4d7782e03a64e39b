package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// Runtime is what stages run with but do not hash: the domain with its
// tools, the target model's client and the proposer's. Build it with
// NewRuntime, or set the fields directly (tests); Close releases what
// NewRuntime opened.
type Runtime struct {
	Domain episode.Domain
	Model  episode.Chatter
	// Proposer answers the llm proposer; nil unless harness.proposer is llm.
	Proposer episode.Chatter
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

// RuntimeOptions tune NewRuntime.
type RuntimeOptions struct {
	// CacheDir holds downloaded retrieval indexes; default the user cache dir.
	CacheDir string
	Log      *slog.Logger
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
	rt := &Runtime{}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	var res registry.Resources
	if r := exp.Tools.Retriever; r != "" {
		if name, ok := strings.CutPrefix(r, spec.RetrieverIndexPrefix); ok {
			cache := o.CacheDir
			if cache == "" {
				if cache, err = os.UserCacheDir(); err != nil {
					cache = os.TempDir()
				}
				cache = filepath.Join(cache, "whale", "indexes")
			}
			dir, _, err := searchqa.DownloadIndex(ctx, s, "indexes/"+name, cache)
			if err != nil {
				return nil, fmt.Errorf("tools.retriever %s: %w", r, err)
			}
			idx, err := searchqa.OpenIndex(dir)
			if err != nil {
				return nil, fmt.Errorf("tools.retriever %s: %w", r, err)
			}
			rt.closers = append(rt.closers, idx.Close)
			res.Retriever = idx
		} else {
			c, err := searchqa.NewClient(r, searchqa.ClientOptions{Logger: log})
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
		if rt.Model, err = openAIClient(exp.Model, log); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	default:
		return nil, fmt.Errorf("model.provider %s: not available in this build of whale", exp.Model.Provider)
	}
	if exp.HasHarnessPhases() && exp.Harness.Proposer == spec.ProposerLLM {
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

// discard is a logger for tests and quiet runs.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
