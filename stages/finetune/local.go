package finetune

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/localserve"
	"github.com/whalerun/whale/schemas"
)

// The local backend trains whale's built-in model (models/local) in this
// process:
//
//   - The base is the previous finetune stage's checkpoint (input "base",
//     downloaded from the bucket) or else Config.BaseCheckpoint, a path on
//     this machine to a checkpoint file or a directory holding one (see
//     localserve.LoadPath). Optimiser state in the base is ignored: each
//     stage is a fresh SFT run, as with the command backend's trainers.
//   - Each SFT row is rendered with the chat template (local.Encode); a
//     token carries loss when an assistant wrote it and its message's
//     train_mask is set. A row longer than the context is cut to its first
//     Context tokens and kept when the cut still holds loss, else dropped;
//     rows with no loss at all are dropped too. Both are counted in the
//     summary (SumLocalCut, SumLocalDropped).
//   - Epochs passes over the rows, each in an order drawn from the stage
//     seed (PCG (Seed, epoch)), in batches of Env["WHALE_BATCH_SIZE"]
//     (default DefaultLocalBatchSize) at a constant LearningRate with AdamW
//     (no weight decay, gradient norm clipped at 1). GOMAXPROCS does not
//     change the result (local.TrainStep), so a retry retrains the same
//     weights.
//   - The new weights go to $WHALE_OUTPUT_DIR/model.whalelm without optimiser
//     state and are uploaded like any trainer's output; the model id is
//     "<ModelName>@<first 16 hex digits of the weights' Digest>".

// DefaultLocalBatchSize is the local backend's batch size when Env does
// not set WHALE_BATCH_SIZE.
const DefaultLocalBatchSize = 16

// Summary keys the local backend adds.
const (
	SumLocalSteps     = "train_steps"
	SumLocalTokens    = "train_tokens"     // masked tokens over all steps
	SumLocalLossFirst = "train_loss_first" // mean loss of the first epoch
	SumLocalLossLast  = "train_loss_last"  // mean loss of the last epoch
	SumLocalCut       = "examples_cut"
	SumLocalDropped   = "examples_dropped"
)

// checkLocal checks the local backend's settings.
func (c Config) checkLocal() []error {
	var errs []error
	if c.LoRA {
		errs = append(errs, errors.New("lora: the local backend trains all weights; set lora false"))
	}
	if v, ok := c.Env["WHALE_BATCH_SIZE"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("env WHALE_BATCH_SIZE %q: want an integer ≥ 1", v))
		}
	}
	return errs
}

func localBatchSize(cfg Config) int {
	if n, err := strconv.Atoi(cfg.Env["WHALE_BATCH_SIZE"]); err == nil && n > 0 {
		return n
	}
	return DefaultLocalBatchSize
}

// trainLocal is the local backend: it trains the base at j.base on the
// SFT Parquet files in j.sftDir and saves the result in j.outDir; it
// returns the model id.
func (*Stage) trainLocal(ctx context.Context, j *job) (string, error) {
	log, x, cfg := j.log, j.x, j.cfg
	log.Info("finetune: training the local model", "examples", j.examples, "base", j.base, "output", j.outDir)
	m, err := localserve.LoadPath(j.base)
	if err != nil {
		return "", fmt.Errorf("finetune: local base: %w", err)
	}
	mc := m.Config()
	exs, st, err := readLocalExamples(ctx, j.sftDir, mc.Context)
	if err != nil {
		return "", err
	}
	x.SetSummary(SumLocalCut, st.cut)
	x.SetSummary(SumLocalDropped, st.dropped)
	if st.cut+st.dropped > 0 {
		log.Warn("finetune: SFT rows longer than the model's context", "context", mc.Context, "cut", st.cut, "dropped", st.dropped)
	}
	if len(exs) == 0 {
		return "", fmt.Errorf("finetune: local: none of the %d SFT rows has a trainable token within the context of %d", st.dropped, mc.Context)
	}
	// A model loaded without optimiser state starts AdamW afresh; one that
	// had state keeps it, so drop it by reloading from the weights alone.
	if m, err = withoutOptimizer(m); err != nil {
		return "", err
	}
	bs := localBatchSize(cfg)
	opts := local.TrainOptions{LR: cfg.LearningRate, ClipNorm: 1}
	var steps, tokens int64
	var first, last float64
	for epoch := range cfg.Epochs {
		rng := rand.New(rand.NewPCG(uint64(x.Seed), uint64(epoch)))
		order := rng.Perm(len(exs))
		var sum float64
		var n int
		for a := 0; a < len(order); a += bs {
			batch := make([]local.Example, 0, bs)
			for _, i := range order[a:min(a+bs, len(order))] {
				batch = append(batch, exs[i])
			}
			s, err := m.TrainStep(ctx, batch, opts)
			if err != nil {
				return "", fmt.Errorf("finetune: local epoch %d: %w", epoch+1, err)
			}
			steps++
			tokens += int64(s.Tokens)
			sum += s.Loss * float64(s.Tokens)
			n += s.Tokens
			log.Debug("finetune: local step", "step", s.Step, "loss", s.Loss, "tokens", s.Tokens, "grad_norm", s.GradNorm)
		}
		last = sum / float64(n)
		if epoch == 0 {
			first = last
		}
		log.Info("finetune: local epoch done", "epoch", epoch+1, "loss", last, "steps", steps)
	}
	x.SetSummary(SumLocalSteps, steps)
	x.SetSummary(SumLocalTokens, tokens)
	x.SetSummary(SumLocalLossFirst, first)
	x.SetSummary(SumLocalLossLast, last)
	if err := m.Save(filepath.Join(j.outDir, localserve.CheckpointFile), false); err != nil {
		return "", fmt.Errorf("finetune: save local checkpoint: %w", err)
	}
	name := cfg.ModelName
	if name == "" {
		name = filepath.Base(cfg.BaseCheckpoint)
	}
	return name + "@" + m.Digest()[:16], nil
}

// withoutOptimizer round-trips m through a weights-only checkpoint so
// training starts with fresh AdamW moments whatever the base carried.
func withoutOptimizer(m *local.Model) (*local.Model, error) {
	var buf bytes.Buffer
	if err := m.EncodeCheckpoint(&buf, false); err != nil {
		return nil, fmt.Errorf("finetune: local base: %w", err)
	}
	out, err := local.DecodeCheckpoint(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("finetune: local base: %w", err)
	}
	return out, nil
}

type localStats struct{ cut, dropped int64 }

// readLocalExamples tokenizes the SFT rows of every Parquet file in dir,
// in file then row order.
func readLocalExamples(ctx context.Context, dir string, ctxLen int) ([]local.Example, localStats, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil {
		return nil, localStats{}, fmt.Errorf("finetune: %w", err)
	}
	sort.Strings(files)
	var out []local.Example
	var st localStats
	for _, p := range files {
		if err := readLocalFile(ctx, p, ctxLen, &out, &st); err != nil {
			return nil, st, err
		}
	}
	return out, st, nil
}

func readLocalFile(ctx context.Context, p string, ctxLen int, out *[]local.Example, st *localStats) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	row := 0
	err = schemas.ReadRows(ctx, f, fi.Size(), func(ex schemas.SFTExample) error {
		defer func() { row++ }()
		e, err := LocalExample(ex)
		if err != nil {
			return fmt.Errorf("row %d (example_id %q): %w", row, ex.ExampleID, err)
		}
		if len(e.Tokens) > ctxLen {
			e.Tokens, e.Mask = e.Tokens[:ctxLen], e.Mask[:ctxLen]
			st.cut++
			if !hasLoss(e.Mask) {
				st.cut--
				st.dropped++
				return nil
			}
		}
		if !hasLoss(e.Mask) {
			st.dropped++
			return nil
		}
		*out = append(*out, e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("finetune: local: read %s: %w", filepath.Base(p), err)
	}
	return nil
}

// hasLoss: a masked token with a token before it (the first token is
// never predicted).
func hasLoss(mask []bool) bool {
	for t := 1; t < len(mask); t++ {
		if mask[t] {
			return true
		}
	}
	return false
}

// LocalExample renders an SFT row with the local model's chat template: the
// loss covers the tokens of assistant messages whose train_mask is set.
func LocalExample(ex schemas.SFTExample) (local.Example, error) {
	if len(ex.TrainMask) != len(ex.Messages) {
		return local.Example{}, fmt.Errorf("train_mask has %d entries for %d messages", len(ex.TrainMask), len(ex.Messages))
	}
	tools, err := local.ToolsFromJSON(ex.Tools)
	if err != nil {
		return local.Example{}, err
	}
	ids, asst, err := local.EncodeTools(ex.Messages, tools, false)
	if err != nil {
		return local.Example{}, err
	}
	// The template is <|bos|>, the turn listing the tools if any, then one
	// span per message, so message k ends where the encoding of the first
	// k+1 messages ends.
	head, _, err := local.EncodeTools(nil, tools, false)
	if err != nil {
		return local.Example{}, err
	}
	mask := make([]bool, len(ids))
	start := len(head)
	for k := range ex.Messages {
		end := len(ids)
		if k+1 < len(ex.Messages) {
			pre, _, err := local.EncodeTools(ex.Messages[:k+1], tools, false)
			if err != nil {
				return local.Example{}, err
			}
			end = len(pre)
		}
		for t := start; t < end; t++ {
			mask[t] = asst[t] && ex.TrainMask[k]
		}
		start = end
	}
	return local.Example{Tokens: ids, Mask: mask}, nil
}
