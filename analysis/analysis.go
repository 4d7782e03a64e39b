package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/schemas"
)

// Dimensions rows can be grouped by.
const (
	DimRun      = "run"
	DimSchedule = "schedule"
	DimPosition = "position"
	DimRound    = "round"   // "r003", from the position
	DimSection  = "section" // weight, harness or test, from the position
	DimStage    = "stage"   // rollout or evaluate, from the stage folder
	DimHarness  = "harness_id"
	DimModel    = "model_id"
	DimTask     = "task_id"
)

// Sections a position can name.
const (
	SectionWeight  = "weight"
	SectionHarness = "harness"
	SectionTest    = "test"
)

var dims = []string{DimRun, DimSchedule, DimPosition, DimRound, DimSection, DimStage, DimHarness, DimModel, DimTask}

// aliases are the short names people type for the id columns.
var aliases = map[string]string{"harness": DimHarness, "model": DimModel, "task": DimTask}

// DefaultBy is the grouping when none is asked for: one line per stage.
var DefaultBy = []string{DimRun, DimPosition, DimStage}

// ParseBy parses a comma-separated list of dimensions ("round,harness").
// An empty list groups every row together.
func ParseBy(s string) ([]string, error) {
	by := []string{}
	if strings.TrimSpace(s) == "" {
		return by, nil
	}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if a, ok := aliases[f]; ok {
			f = a
		}
		if !slices.Contains(dims, f) {
			return nil, fmt.Errorf("unknown group column %q (have %s)", f, strings.Join(dims, ", "))
		}
		if slices.Contains(by, f) {
			return nil, fmt.Errorf("group column %q given twice", f)
		}
		by = append(by, f)
	}
	return by, nil
}

// Options choose the grouping and k.
type Options struct {
	// By lists the group columns; nil means DefaultBy, empty one group.
	By []string
	// K is k of pass@k; 0 means each task's own sample count n (pass@k is
	// then "any of the n correct"). A task with fewer than K samples is
	// scored with k = n, as metrics.Accumulator does, and a note says so.
	K int
}

// Labels are what a file's rows do not say themselves: where the file sits.
// An empty Run or Position is read from the rows; an empty Stage or
// Schedule stays unknown.
type Labels struct {
	Run, Schedule, Position, Stage string
}

// maxDims bounds a group key; keys are fixed-size arrays so that a lookup
// per row allocates nothing.
const maxDims = 9

type groupKey [maxDims]string

// posInfo is what a position says for round and section.
type posInfo struct {
	pos     schedule.Pos
	ok      bool
	round   string
	section string
}

// Analyzer accumulates rollout rows into groups. It is not safe for
// concurrent use.
type Analyzer struct {
	by []string
	k  int

	index  map[groupKey]int
	keys   []groupKey
	ids    []string // the group's name inside the accumulators
	scores *metrics.Accumulator
	// costs sees each row with correct as its reward and its prompt tokens
	// as its tokens, so that its macro averages are accuracy and prompt
	// tokens, computed by the same arithmetic as the scores.
	costs     *metrics.Accumulator
	positions map[string]posInfo
	rows      int64
	files     int
	notes     []string
}

// New returns an empty Analyzer.
func New(opts Options) (*Analyzer, error) {
	by := opts.By
	if by == nil {
		by = DefaultBy
	}
	for i, d := range by {
		if !slices.Contains(dims, d) {
			return nil, fmt.Errorf("unknown group column %q (have %s)", d, strings.Join(dims, ", "))
		}
		if slices.Contains(by[:i], d) {
			return nil, fmt.Errorf("group column %q given twice", d)
		}
	}
	if opts.K < 0 {
		return nil, fmt.Errorf("k = %d: want 0 (each task's own n) or more", opts.K)
	}
	return &Analyzer{
		by:        slices.Clone(by),
		k:         opts.K,
		index:     make(map[groupKey]int),
		scores:    metrics.NewAccumulator(opts.K),
		costs:     metrics.NewAccumulator(opts.K),
		positions: make(map[string]posInfo),
	}, nil
}

// Rows is the number of rows added so far.
func (a *Analyzer) Rows() int64 { return a.rows }

// position returns what p says, parsing each distinct position once.
func (a *Analyzer) position(p string) posInfo {
	if pi, ok := a.positions[p]; ok {
		return pi
	}
	var pi posInfo
	if pos, err := schedule.ParsePosition(p); err == nil {
		pi = posInfo{pos: pos, ok: true, round: fmt.Sprintf("r%03d", pos.Round), section: sectionName(pos.Section)}
	}
	// The key may alias a decoded record batch that is about to be released.
	a.positions[strings.Clone(p)] = pi
	return pi
}

func sectionName(s schedule.Section) string {
	switch s {
	case schedule.SectionWeight:
		return SectionWeight
	case schedule.SectionHarness:
		return SectionHarness
	default:
		return SectionTest
	}
}

// episode is the part of a rollout row the analysis needs.
type episode struct {
	task             string
	reward           float64
	correct          bool
	failed           bool
	turns            int32
	prompt, complete int64
}

// add counts one episode into the group whose key values are k.
func (a *Analyzer) add(k *groupKey, e episode) {
	g, ok := a.index[*k]
	if !ok {
		for i := range k {
			k[i] = strings.Clone(k[i])
		}
		g = len(a.keys)
		a.index[*k] = g
		a.keys = append(a.keys, *k)
		a.ids = append(a.ids, strconv.Itoa(g))
	}
	id := a.ids[g]
	var errText string
	if e.failed {
		errText = "failed"
	}
	a.scores.Add(schemas.Rollout{HarnessID: id, TaskID: e.task, Reward: e.reward, Correct: e.correct,
		Error: errText, Turns: e.turns, CompletionTokens: e.complete})
	var acc float64
	if e.correct {
		acc = 1
	}
	a.costs.Add(schemas.Rollout{HarnessID: id, TaskID: e.task, Reward: acc, PromptTokens: e.prompt})
	a.rows++
}

// Note records a remark for the reader of the result, such as a run with
// no rollouts yet.
func (a *Analyzer) Note(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}

// Result is the analysis of every row added. Its JSON form is the one
// `whale analyze --format json` prints (see MarshalJSON).
type Result struct {
	By     []string
	K      int // as asked; 0: each task's own n
	Rows   int64
	Files  int
	Groups []Group
	Notes  []string
}

// Group is the score of one group of rows.
type Group struct {
	// Key holds the values of Result.By, in order; "" where unknown
	// (a loose file has no schedule; a free-form position no round).
	Key      []string
	Episodes int
	Tasks    int
	// KMin and KMax are the smallest and largest k pass@k used over the
	// group's tasks: k = n per task by default, so they differ when tasks
	// have different sample counts.
	KMin, KMax           int
	MeanAtK              float64
	PassAtK              float64
	Accuracy             float64
	MeanTurns            float64
	MeanPromptTokens     float64
	MeanCompletionTokens float64
	Failed               int
	FailureRate          float64
}

// Result scores the groups. The Analyzer may go on accumulating after.
func (a *Analyzer) Result() Result {
	r := Result{By: slices.Clone(a.by), K: a.k, Rows: a.rows, Files: a.files, Notes: slices.Clone(a.notes)}
	r.Groups = make([]Group, len(a.keys))
	for i := range r.Groups {
		r.Groups[i].Key = slices.Clone(a.keys[i][:len(a.by)])
	}
	// The accumulators' groups are (id, "", task); Evals gives each task's k.
	kmin, kmax, short := 0, 0, 0
	for _, ev := range a.scores.Evals() {
		g := &r.Groups[a.groupOf(ev.HarnessID)]
		k := int(ev.K)
		if g.KMin == 0 || k < g.KMin {
			g.KMin = k
		}
		g.KMax = max(g.KMax, k)
		if kmin == 0 || k < kmin {
			kmin = k
		}
		kmax = max(kmax, k)
		if a.k > 0 && k < a.k {
			short++
		}
	}
	for _, s := range a.scores.Summaries() {
		g := &r.Groups[a.groupOf(s.HarnessID)]
		g.Episodes, g.Tasks, g.Failed = s.Episodes, s.Tasks, s.Failed
		g.MeanAtK, g.PassAtK, g.MeanTurns, g.MeanCompletionTokens = s.MeanAtK, s.PassAtK, s.MeanTurns, s.MeanTokens
		g.FailureRate = float64(s.Failed) / float64(s.Episodes)
	}
	for _, s := range a.costs.Summaries() {
		g := &r.Groups[a.groupOf(s.HarnessID)]
		g.Accuracy, g.MeanPromptTokens = s.MeanAtK, s.MeanTokens
	}
	switch {
	case a.k == 0 && kmin != kmax:
		r.Notes = append(r.Notes, fmt.Sprintf("tasks have different sample counts (n from %d to %d): pass@k uses k = n per task, so pass@k differs in meaning between groups; pass --k to fix k", kmin, kmax))
	case short > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("%d (group, task) pairs have fewer than k = %d samples and are scored with k = n", short, a.k))
	}
	slices.SortFunc(r.Groups, func(x, y Group) int { return a.compareKeys(x.Key, y.Key) })
	return r
}

func (a *Analyzer) groupOf(id string) int {
	g, err := strconv.Atoi(id)
	if err != nil || g < 0 || g >= len(a.keys) {
		// Only add names groups, so this is a bug, not bad input.
		panic(fmt.Sprintf("analysis: accumulator group %q unknown", id))
	}
	return g
}

// compareKeys orders groups column by column: positions and rounds as the
// planner issues them, everything else as text.
func (a *Analyzer) compareKeys(x, y []string) int {
	for i, d := range a.by {
		var c int
		switch d {
		case DimPosition:
			c = a.comparePositions(x[i], y[i])
		case DimRound:
			c = compareRounds(x[i], y[i])
		default:
			c = strings.Compare(x[i], y[i])
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func (a *Analyzer) comparePositions(x, y string) int {
	px, py := a.position(x), a.position(y)
	switch {
	case px.ok && py.ok:
		return cmp.Or(px.pos.Compare(py.pos), strings.Compare(x, y))
	case px.ok != py.ok:
		// Round positions first, free-form names after.
		if px.ok {
			return -1
		}
		return 1
	default:
		return strings.Compare(x, y)
	}
}

// compareRounds orders "r9" before "r010": rounds widen past three digits.
func compareRounds(x, y string) int {
	nx, ex := strconv.Atoi(strings.TrimPrefix(x, "r"))
	ny, ey := strconv.Atoi(strings.TrimPrefix(y, "r"))
	switch {
	case ex == nil && ey == nil:
		return cmp.Compare(nx, ny)
	case ex == nil:
		return -1 // known rounds before unknown ones
	case ey == nil:
		return 1
	default:
		return strings.Compare(x, y)
	}
}
