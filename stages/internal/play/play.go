package play

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// Stop sequences go before the harness's STOP.
	Stop []string `json:"stop,omitempty"`
}

// Models is s as the model client takes it.
func (s Sampling) Models() models.Sampling {
	return models.Sampling{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MaxTokens: s.MaxTokens, Stop: s.Stop}
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
// absolute position Offset of an endless sequence of epochs, each epoch
// being the n tasks once, so that consecutive train batches (Offset +=
// Limit) cycle through epochs. Limit 0, or a Limit above n, means n: a
// window never holds a task twice, since two episodes with the same task
// and sample would share a seed and an evals group.
//
// Without Shuffle every epoch is the stored order, and the window is the
// n tasks from Offset modulo n, wrapping around the end. With Shuffle,
// epoch e (position p is in epoch ⌊p/n⌋) is an order of its own, a pure
// function of the seed, e, n and the window's grid: see Indices.
type Window struct {
	Offset, Limit int
	// Shuffle, when set, is the seed of the per-epoch orders; nil keeps
	// the stored order in every epoch.
	Shuffle *int64
}

// Span returns the first index and length of the window over n tasks in
// stored order (Shuffle aside): the window is the length indices from
// start, wrapping around n.
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

// Indices returns the stored-order indices of the window's tasks among n,
// in window order: length distinct indices (see Span).
//
// With Shuffle, epoch e's order starts as a Fisher–Yates shuffle of 0..n-1
// drawn from a PCG seeded with (*Shuffle, e): see perm. The windows of a
// run form a grid, the positions Offset + k*L for every integer k, where L
// is the window's length; all windows of a grid agree on every epoch's
// order, so each task is in exactly one window slot per epoch. A window
// that crosses from epoch e into e+1 takes the tail of e's order, then the
// head of e+1's. When a task of that tail is also in that head, e+1's
// order is repaired before any window reads it: the head keeps its other
// tasks in place and takes, for each such task in turn, the next task of
// e+1's order after the head that is not in the tail; the two swap places,
// so the displaced task comes later in epoch e+1. The swap partners are
// taken before the part of e+1's order that the next crossing window
// reads, so that part, and so every repair, depends only on the shuffles
// of epochs e and e+1 (two or three shuffles per window, whatever the
// Offset). There are always enough partners when 2L-1 ≤ n. With a larger
// window (more than about half the tasks, Limit 0 included) each task
// once per epoch and no task twice in a window cannot both hold with
// epochs drawn independently, so then every epoch uses the order of
// epoch 0, unrepaired, which keeps both.
func (w Window) Indices(n int) []int {
	start, length := w.Span(n)
	idx := make([]int, length)
	if w.Shuffle == nil || n == 0 {
		for j := range idx {
			idx[j] = (start + j) % n
		}
		return idx
	}
	seed, L := *w.Shuffle, length
	if 2*L-1 > n {
		order := perm(n, seed, 0)
		for j := range idx {
			idx[j] = order[(start+j)%n]
		}
		return idx
	}
	// The window starts at index start of epoch e; tail(k) is how many
	// positions of epoch e+k-1 the grid window crossing into epoch e+k
	// holds (0 when a window starts at the boundary).
	e := w.Offset / n
	if w.Offset%n < 0 {
		e--
	}
	tail := func(k int) int { return (((k*n - start) % L) + L) % L }
	order := epochOrder(n, L, seed, e, tail(0), tail(1))
	for j := range idx {
		if start+j == n {
			order = epochOrder(n, L, seed, e+1, tail(1), tail(2))
		}
		idx[j] = order[(start+j)%n]
	}
	return idx
}

// epochOrder is the order of epoch e of n tasks under windows of length L
// (2L-1 ≤ n) when the window crossing into e holds the last in positions
// of epoch e-1 and the window crossing out of e the last out of e.
func epochOrder(n, L int, seed int64, e, in, out int) []int {
	order := perm(n, seed, e)
	if in == 0 {
		return order
	}
	// The previous epoch's repair left its last in positions alone.
	prev := map[int]bool{}
	for _, i := range perm(n, seed, e-1)[n-in:] {
		prev[i] = true
	}
	head, j := L-in, L-in
	for i := range head {
		if !prev[order[i]] {
			continue
		}
		for j < n-out && prev[order[j]] {
			j++
		}
		if j >= n-out {
			panic("play: no partner for a repeated task: 2L-1 > n")
		}
		order[i], order[j] = order[j], order[i]
		j++
	}
	return order
}

// perm is epoch's order of 0..n-1: math/rand/v2's Perm drawn from
// rand.NewPCG(uint64(seed), uint64(epoch)). Go pins PCG's outputs and
// Rand's draws from release to release (math/rand/v2's regression test),
// so a rerun reads the same order; the orders are those of 64-bit
// platforms, where whale runs (Rand draws small bounds another way on
// 32-bit ones).
func perm(n int, seed int64, epoch int) []int {
	return rand.New(rand.NewPCG(uint64(seed), uint64(epoch))).Perm(n)
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
	idx := w.Indices(len(all))
	list := make([]schemas.Task, len(idx))
	for j, i := range idx {
		list[j] = all[i]
	}
	return Tasks{List: list, Total: len(all), Start: idx[0]}, nil
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
