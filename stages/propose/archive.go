package propose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	harchive "github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Episodes sampled per evaluated harness for proposers to read.
const (
	sampleFailed = 3
	samplePassed = 2
	// maxKeptText bounds each message and trace event kept from a sampled
	// episode, so that a long transcript cannot blow up memory or a prompt.
	maxKeptText = 4000
)

// archive is what the phase has tried so far, as the archive inputs tell.
type archive struct {
	inputs []string // input names in order, for messages
	// order lists every known harness id, first seen first; h0 first.
	order   []string
	sources map[string]archived // id → candidate row (with source)
	scores  map[string]*score   // id → aggregated evals
	samples map[string]*sampled // id → sampled episodes
	h0      string
}

// archived is one known harness: a candidate row, and where it came from.
type archived struct {
	schemas.Candidate
	Position string // the propose stage's position; "" for h0
}

type score struct {
	tasks      int
	sumReward  float64
	sumTurns   float64
	OnFrontier bool
	Winner     bool
}

func (s *score) Success() float64 {
	if s.tasks == 0 {
		return 0
	}
	return s.sumReward / float64(s.tasks)
}

func (s *score) Turns() float64 {
	if s.tasks == 0 {
		return 0
	}
	return s.sumTurns / float64(s.tasks)
}

type sampled struct {
	failed, passed       []schemas.Rollout
	seenFailed, seenPass int
}

func (a *archive) describeInputs() string {
	if len(a.inputs) == 0 {
		return "no archive inputs"
	}
	return strings.Join(a.inputs, ", ")
}

func (a *archive) note(id string) {
	if _, ok := a.sources[id]; ok {
		return
	}
	if _, ok := a.scores[id]; ok {
		return
	}
	a.order = append(a.order, id)
}

// archiveInputs returns the stage's archive inputs in order: "archive",
// then "archive-0", "archive-1", … by number.
func archiveInputs(x *stages.Exec) []string {
	var names []string
	for name := range x.Inputs {
		if name == "archive" || strings.HasPrefix(name, "archive-") {
			names = append(names, name)
		}
	}
	num := func(n string) int {
		i, err := strconv.Atoi(strings.TrimPrefix(n, "archive-"))
		if err != nil {
			return -1
		}
		return i
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(num(a), num(b)), cmp.Compare(a, b))
	})
	return names
}

// readArchive reads every archive input: candidates (with sources) from
// propose stages, evals, frontier flags and a deterministic sample of
// failed and passed episodes from evaluate stages. Files are streamed; what
// stays in memory is the candidates' sources, one score per harness and a
// few clipped episodes per harness.
func readArchive(ctx context.Context, x *stages.Exec, dom episode.Domain, episodes bool) (*archive, error) {
	a := &archive{
		sources: map[string]archived{},
		scores:  map[string]*score{},
		samples: map[string]*sampled{},
	}
	base := dom.Baseline()
	a.h0 = harness.SourceID(base)
	a.order = append(a.order, a.h0)
	a.sources[a.h0] = archived{Candidate: schemas.Candidate{
		HarnessID: a.h0, Name: "h0", Hypothesis: "the domain's baseline harness", Axis: "baseline",
		Proposer: "baseline", Source: string(base),
	}}
	rng := rand.New(rand.NewPCG(uint64(x.Seed), 0x70726f706f7365)) // "propose"
	for _, name := range archiveInputs(x) {
		m := x.Inputs[name]
		if err := checkNotTest(name, m.Dir, m.Stage, m.Config); err != nil {
			return nil, err
		}
		a.inputs = append(a.inputs, name+" ("+m.Dir+")")
		if err := a.readCandidates(ctx, x, m); err != nil {
			return nil, err
		}
		if err := a.readEvals(ctx, x, m); err != nil {
			return nil, err
		}
		a.readEvaluated(m)
		if !episodes {
			continue
		}
		if err := a.readRollouts(ctx, x, m, rng); err != nil {
			return nil, err
		}
	}
	a.markFrontier()
	return a, nil
}

func (a *archive) readCandidates(ctx context.Context, x *stages.Exec, m *storage.Manifest) error {
	return eachRow(ctx, x, m, schemas.Candidates.Name, func(c schemas.Candidate) error {
		if c.Source != "" && harness.SourceID([]byte(c.Source)) != c.HarnessID {
			return fmt.Errorf("candidate %q: harness_id %s is not the id of its source", c.Name, c.HarnessID)
		}
		a.note(c.HarnessID)
		if _, ok := a.sources[c.HarnessID]; !ok {
			a.sources[c.HarnessID] = archived{Candidate: c, Position: m.Position}
		}
		return nil
	})
}

func (a *archive) readEvals(ctx context.Context, x *stages.Exec, m *storage.Manifest) error {
	return eachRow(ctx, x, m, schemas.Evals.Name, func(e schemas.Eval) error {
		a.note(e.HarnessID)
		s := a.scores[e.HarnessID]
		if s == nil {
			s = &score{}
			a.scores[e.HarnessID] = s
		}
		s.tasks++
		s.sumReward += e.MeanReward
		s.sumTurns += e.MeanTurns
		return nil
	})
}

// readEvaluated names the harnesses an evaluate stage scored, from its
// summary (the home of its frontier for any shard count): a harness that
// no propose stage of the archive proposed (h0, or the phase's incoming
// harness) gets its name and parent there. The frontier flags themselves
// are recomputed over the whole archive by markFrontier, since each
// evaluation only ranks its own candidates.
func (a *archive) readEvaluated(m *storage.Manifest) {
	list, _ := m.Summary["candidates"].([]any)
	for _, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			continue
		}
		id, _ := obj["harness_id"].(string)
		if !harnessIDRE.MatchString(id) {
			continue
		}
		if _, ok := a.sources[id]; ok {
			continue
		}
		a.note(id)
		name, _ := obj["name"].(string)
		parent, _ := obj["parent_id"].(string)
		a.sources[id] = archived{Candidate: schemas.Candidate{HarnessID: id, Name: name, ParentID: parent}, Position: m.Position}
	}
}

// fill fetches the sources of archived harnesses that no candidates table
// held (an incoming harness scored by id) from the harness store.
func (a *archive) fill(ctx context.Context, src Sources) error {
	if src == nil {
		return nil
	}
	for _, id := range a.order {
		c, ok := a.sources[id]
		if ok && c.Source != "" {
			continue
		}
		data, err := src.Get(ctx, id)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, harchive.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("propose: archived harness %s: %w", id, err)
		}
		if harness.SourceID(data) != id {
			return fmt.Errorf("propose: archived harness %s: the store returned a source whose id is %s", id, harness.SourceID(data))
		}
		c.HarnessID, c.Source = id, string(data)
		a.sources[id] = c
	}
	return nil
}

// markFrontier sets on_frontier (success ↑, mean turns ↓) and the winner
// (top success, ties to fewer turns, then to the earlier harness) over
// every harness the archive's evals scored, by the evaluate stage's rule.
func (a *archive) markFrontier() {
	ids := a.scored()
	for _, id := range ids {
		s := a.scores[id]
		s.OnFrontier = true
		for _, o := range ids {
			t := a.scores[o]
			if o != id && t.Success() >= s.Success() && t.Turns() <= s.Turns() &&
				(t.Success() > s.Success() || t.Turns() < s.Turns()) {
				s.OnFrontier = false
				break
			}
		}
	}
	if best := a.ranked(); len(best) > 0 {
		a.scores[best[0]].Winner = true
	}
}

// scored lists the evaluated harnesses in archive order.
func (a *archive) scored() []string {
	var ids []string
	for _, id := range a.order {
		if a.scores[id] != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// ranked lists the evaluated harnesses best first: success ↓, turns ↑,
// then archive order.
func (a *archive) ranked() []string {
	ids := a.scored()
	slices.SortStableFunc(ids, func(p, q string) int {
		sp, sq := a.scores[p], a.scores[q]
		return cmp.Or(cmp.Compare(sq.Success(), sp.Success()), cmp.Compare(sp.Turns(), sq.Turns()))
	})
	return ids
}

// readRollouts keeps, per harness, a uniform sample (reservoir, seeded by
// the stage) of failed (reward ≤ 0) and passed episodes.
func (a *archive) readRollouts(ctx context.Context, x *stages.Exec, m *storage.Manifest, rng *rand.Rand) error {
	return eachRow(ctx, x, m, schemas.Rollouts.Name, func(r schemas.Rollout) error {
		if r.Section == sectionTest {
			return nil
		}
		s := a.samples[r.HarnessID]
		if s == nil {
			s = &sampled{}
			a.samples[r.HarnessID] = s
		}
		if r.Reward > 0 {
			s.seenPass++
			reservoir(&s.passed, r, s.seenPass, samplePassed, rng)
		} else {
			s.seenFailed++
			reservoir(&s.failed, r, s.seenFailed, sampleFailed, rng)
		}
		return nil
	})
}

func reservoir(keep *[]schemas.Rollout, r schemas.Rollout, seen, k int, rng *rand.Rand) {
	if len(*keep) < k {
		*keep = append(*keep, clipRollout(r))
		return
	}
	if j := rng.IntN(seen); j < k {
		(*keep)[j] = clipRollout(r)
	}
}

func clipRollout(r schemas.Rollout) schemas.Rollout {
	msgs := make([]schemas.Message, len(r.Messages))
	for i, m := range r.Messages {
		m.Content = clip(m.Content, maxKeptText)
		msgs[i] = m
	}
	r.Messages = msgs
	trace := make([]schemas.TraceEvent, len(r.Trace))
	for i, e := range r.Trace {
		e.Action = clip(e.Action, maxKeptText/4)
		e.Feedback = clip(e.Feedback, maxKeptText/4)
		trace[i] = e
	}
	r.Trace = trace
	r.Error = clip(r.Error, maxKeptText)
	return r
}

// clip cuts s to about n bytes, keeping the head and the tail (a
// transcript's end is where it failed), on rune boundaries.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "\n[… %d bytes cut …]\n"
	head := n * 2 / 3
	tail := n - head
	for head > 0 && !isRuneStart(s[head]) {
		head--
	}
	start := len(s) - tail
	for start < len(s) && !isRuneStart(s[start]) {
		start++
	}
	return s[:head] + fmt.Sprintf(mark, start-head) + s[start:]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// renderEpisode writes one episode as text for a proposer: its outcome,
// the last messages and the trace, each cut to fit within about limit bytes.
func renderEpisode(r schemas.Rollout, limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %s · reward %g · correct %v · finish %s · turns %d\n", r.TaskID, r.Reward, r.Correct, r.FinishReason, r.Turns)
	if r.Answer != "" {
		fmt.Fprintf(&b, "graded answer: %s\n", clip(r.Answer, 200))
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", clip(r.Error, 500))
	}
	msgs := r.Messages
	const lastN = 6
	if len(msgs) > lastN {
		fmt.Fprintf(&b, "\n--- messages (last %d of %d) ---\n", lastN, len(msgs))
		msgs = msgs[len(msgs)-lastN:]
	} else {
		b.WriteString("\n--- messages ---\n")
	}
	per := max(200, limit/2/max(1, len(msgs)))
	for _, m := range msgs {
		fmt.Fprintf(&b, "[%s] %s\n", m.Role, clip(m.Content, per))
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(&b, "  (tool call %s %s)\n", tc.Name, clip(tc.Arguments, 200))
		}
	}
	if len(r.Trace) > 0 {
		b.WriteString("\n--- trace ---\n")
		events := r.Trace
		const lastE = 30
		if len(events) > lastE {
			fmt.Fprintf(&b, "(last %d of %d events)\n", lastE, len(events))
			events = events[len(events)-lastE:]
		}
		for _, e := range events {
			fmt.Fprintf(&b, "t%d %s: %s", e.Turn, e.Kind, clip(e.Action, 200))
			if e.Feedback != "" {
				fmt.Fprintf(&b, " → %s", clip(e.Feedback, 200))
			}
			b.WriteByte('\n')
		}
	}
	return clip(b.String(), limit)
}

// eachRow calls fn with every row of the archive table of m, naming the
// file in an error.
func eachRow[T any](ctx context.Context, x *stages.Exec, m *storage.Manifest, table string, fn func(T) error) error {
	for _, f := range m.Table(table) {
		ra, err := x.Open(ctx, m, f)
		if err != nil {
			return fmt.Errorf("propose: open archive %s: %w", m.FileKey(f), err)
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), fn); err != nil {
			return fmt.Errorf("propose: read archive %s: %w", m.FileKey(f), err)
		}
	}
	return nil
}
