package play

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Baseline is the reference that names a domain's baseline harness.
const Baseline = "h0"

// Sampling is the decoding of every model call, as a stage config hashes
// it. Unset fields are left to the client's defaults and the server.
type Sampling struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	// MaxTokens defaults to the harness's MAX_TOKENS when unset.
	MaxTokens *int64 `json:"max_tokens,omitempty"`
}

// Models is s as the model client takes it.
func (s Sampling) Models() models.Sampling {
	return models.Sampling{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MaxTokens: s.MaxTokens}
}

// Seed is the seed of episode (taskID, sample) of a stage whose seed is
// stageSeed: the first four bytes of
//
//	sha256("whale-seed\x00" + decimal(stageSeed) + "\x00" + taskID + "\x00" + decimal(sample))
//
// as a big-endian uint32, shifted right by 2. It does not depend on the
// shard count, the window or the harness, so reruns, reshards and the
// candidates of one evaluation see the same seeds (common random numbers
// make candidates comparable). The range [0, 2^30) fits every server's
// seed type (llama.cpp reads a uint32) with room for the turn number the
// episode loop adds.
func Seed(stageSeed int64, taskID string, sample int) int64 {
	h := sha256.New()
	h.Write([]byte("whale-seed\x00"))
	h.Write(strconv.AppendInt(nil, stageSeed, 10))
	h.Write([]byte{0})
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(sample), 10))
	return int64(binary.BigEndian.Uint32(h.Sum(nil)[:4]) >> 2)
}

// Window picks tasks from an ordered table of n: Limit tasks starting at
// Offset, wrapping around the end, so that consecutive train batches
// (Offset += Limit) cycle through epochs. Offset is taken modulo n; Limit
// 0, or a Limit above n, means all n tasks once (from Offset): a window
// never holds a task twice, since two episodes with the same task and
// sample would share a seed and an evals group.
type Window struct {
	Offset, Limit int
}

// Span returns the first index and length of the window over n tasks.
func (w Window) Span(n int) (start, length int) {
	if n == 0 {
		return 0, 0
	}
	start = ((w.Offset % n) + n) % n
	length = w.Limit
	if length <= 0 || length > n {
		length = n
	}
	return start, length
}

// Tasks is a window read from a tasks input.
type Tasks struct {
	List  []schemas.Task // in window order
	Total int            // tasks in the input after the split filter
	Start int            // index of List[0] in that order
}

// ReadTasks reads the "tasks" table of input in, keeping tasks of split
// (all when empty), and returns the window w of them. Every task must be
// of domain (or name none); a file that is not a tasks table, a task of
// another domain and a task id that appears twice are errors naming the
// file and row.
func ReadTasks(ctx context.Context, x *stages.Exec, in *storage.Manifest, domain, split string, w Window) (Tasks, error) {
	files := in.Table("tasks")
	if len(files) == 0 {
		return Tasks{}, fmt.Errorf("input %s has no tasks table (files: %s)", in.Dir, fileNames(in))
	}
	var all []schemas.Task
	seen := map[string]string{}
	for _, f := range files {
		key := in.FileKey(f)
		ra, err := x.Open(ctx, in, f)
		if err != nil {
			return Tasks{}, fmt.Errorf("read tasks %s: %w", key, err)
		}
		if err := schemas.Validate(ra, ra.Size(), schemas.Tasks); err != nil {
			return Tasks{}, fmt.Errorf("read tasks %s: %w", key, err)
		}
		row := 0
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(t schemas.Task) error {
			row++
			if split != "" && t.Split != split {
				return nil
			}
			if t.Domain != "" && t.Domain != domain {
				return fmt.Errorf("row %d: task %q is of domain %q, and this stage plays %q", row, t.ID, t.Domain, domain)
			}
			where := fmt.Sprintf("%s row %d", key, row)
			if prev, dup := seen[t.ID]; dup {
				return fmt.Errorf("row %d: task id %q also at %s: ids must be unique", row, t.ID, prev)
			}
			seen[t.ID] = where
			all = append(all, t)
			return nil
		})
		if err != nil {
			return Tasks{}, fmt.Errorf("read tasks %s: %w", key, err)
		}
	}
	if len(all) == 0 {
		if split != "" {
			return Tasks{}, fmt.Errorf("input %s has no tasks of split %q", in.Dir, split)
		}
		return Tasks{}, fmt.Errorf("input %s has no tasks", in.Dir)
	}
	start, n := w.Span(len(all))
	list := make([]schemas.Task, n)
	for j := range n {
		list[j] = all[(start+j)%len(all)]
	}
	return Tasks{List: list, Total: len(all), Start: start}, nil
}

func fileNames(m *storage.Manifest) string {
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return fmt.Sprint(names)
}

// Source returns the source and file name of a harness reference: "h0"
// is dom's baseline, which also answers to its own content id without an
// archive; any other id is read from the archive at root.
func Source(ctx context.Context, root *storage.Store, dom episode.Domain, ref string) (filename string, src []byte, err error) {
	base := dom.Baseline()
	switch {
	case ref == "":
		return "", nil, errors.New(`no harness given: use "h0" (the baseline) or a "sha256:<hex>" id`)
	case ref == Baseline || ref == harness.SourceID(base):
		return dom.Name() + "-h0.star", base, nil
	}
	key, err := archive.Key(ref)
	if err != nil {
		return "", nil, fmt.Errorf(`harness %q: want "h0" or an archived id: %w`, ref, err)
	}
	if root == nil {
		return "", nil, fmt.Errorf("harness %s: the stage has no archive store to read %s from", ref, key)
	}
	src, err = archive.Get(ctx, root, ref)
	if err != nil {
		return "", nil, err
	}
	return key, src, nil
}

// Load loads a harness source under dom's contract.
func Load(dom episode.Domain, filename string, src []byte) (*harness.Harness, error) {
	h, err := harness.Load(filename, src, harness.Options{Contract: dom.Contract()})
	if err != nil {
		return nil, fmt.Errorf("harness %s: %w", harness.SourceID(src), err)
	}
	return h, nil
}

// CheckModel fails when the client says it asks for another model than
// the config names: the config is what the stage's identity hashes.
func CheckModel(m episode.Chatter, name string) error {
	if m == nil {
		return errors.New("the stage has no model client")
	}
	if name == "" {
		return errors.New("config.model_name is empty: name the model the episodes use")
	}
	if c, ok := m.(interface{ Model() string }); ok && c.Model() != name {
		return fmt.Errorf("config.model_name is %q but the model client asks for %q", name, c.Model())
	}
	return nil
}

// Stats counts rollout rows for a stage summary.
type Stats struct {
	Episodes, Failed, Correct      int64
	RewardSum, TurnsSum            float64
	PromptTokens, CompletionTokens int64
	models                         map[string]bool
}

// Add counts one row. A row is failed when it carries an error.
func (s *Stats) Add(r *schemas.Rollout) {
	s.Episodes++
	if r.Error != "" {
		s.Failed++
	}
	if r.Correct {
		s.Correct++
	}
	s.RewardSum += r.Reward
	s.TurnsSum += float64(r.Turns)
	s.PromptTokens += r.PromptTokens
	s.CompletionTokens += r.CompletionTokens
	if r.ModelID != "" {
		if s.models == nil {
			s.models = map[string]bool{}
		}
		if !s.models[r.ModelID] {
			s.models[r.ModelID] = true
		}
	}
}

// ModelIDs lists the model ids seen, sorted.
func (s *Stats) ModelIDs() []string {
	ids := make([]string, 0, len(s.models))
	for id := range s.models {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Mean is sum/n, and 0 for no episodes (JSON has no NaN).
func Mean(sum float64, n int64) float64 {
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
