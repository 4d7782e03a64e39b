package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/pipeline/schedule"
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
// allocates nothing.
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
// concurrent use; it reads the row groups of its files in parallel itself.
type Analyzer struct {
	by []string
	k  int

	index map[groupKey]int
	keys  []groupKey
	// tasks are the distinct task ids, each stored once; taskIndex finds
	// them.
	tasks     []string
	taskIndex idTable
	// cells hold the sums of each (group, task) pair in blocks of
	// cellBlock, in the order the pairs were first seen; cellIndex finds
	// them. Blocks grow without copying, so memory is what the pairs need.
	cells     [][]cell
	nCells    int
	cellIndex idTable
	positions map[string]posInfo
	rows      int64
	files     int
	notes     []string

	// runs are the runs added with AddRun, in order; tests holds their
	// test evaluations, one group per test, for the headlines.
	runs  []string
	tests *Analyzer
}

const cellBlock = 4096

// cell is one (group, task) pair of the result.
type cell struct {
	group, task int32
	sums
}

// sums are the totals of one (group, task) pair that every score is
// computed from: integer sums are exact, and the reward sum is compensated
// as in package metrics, so a mean changes with the order rows arrive in
// by at most rounding.
type sums struct {
	n, correct, failed        int64
	turns, prompt, completion int64
	reward                    metrics.Kahan
}

// merge adds o's rows to s. Partial sums merge in a fixed order (files,
// then row groups, in file order), so the same files give the same bits
// however many workers read them.
func (s *sums) merge(o *sums) {
	if s.n == 0 {
		*s = *o
		return
	}
	s.n += o.n
	s.correct += o.correct
	s.failed += o.failed
	s.turns += o.turns
	s.prompt += o.prompt
	s.completion += o.completion
	s.reward.Merge(o.reward)
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

// group returns the index of the group whose key values are k, adding it
// if new. k's strings must not alias memory that is about to be reused.
func (a *Analyzer) group(k groupKey) int32 {
	g, ok := a.index[k]
	if !ok {
		g = len(a.keys)
		a.index[k] = g
		a.keys = append(a.keys, k)
	}
	return int32(g)
}

// task returns the index of task id t, adding it if new. t must not
// alias memory that is about to be reused.
func (a *Analyzer) task(t string) int32 {
	i, slot := a.taskIndex.find(hashString(t), func(i int32) bool { return a.tasks[i] == t })
	if i < 0 {
		i = int32(len(a.tasks))
		a.tasks = append(a.tasks, t)
		a.taskIndex.insert(slot, func(i int32) uint64 { return hashString(a.tasks[i]) })
	}
	return i
}

// cell returns the cell at index i.
func (a *Analyzer) cell(i int32) *cell { return &a.cells[i/cellBlock][i%cellBlock] }

func (c *cell) key() uint64 { return uint64(uint32(c.group))<<32 | uint64(uint32(c.task)) }

// addCell adds the sums of one (group, task) pair.
func (a *Analyzer) addCell(g, task int32, s *sums) {
	c := cell{group: g, task: task}
	key := c.key()
	i, slot := a.cellIndex.find(hashKey(key), func(i int32) bool { return a.cell(i).key() == key })
	if i < 0 {
		i = int32(a.nCells)
		if a.nCells%cellBlock == 0 {
			a.cells = append(a.cells, make([]cell, 0, cellBlock))
		}
		b := &a.cells[len(a.cells)-1]
		*b = append(*b, c)
		a.nCells++
		a.cellIndex.insert(slot, func(i int32) uint64 { return hashKey(a.cell(i).key()) })
	}
	a.cell(i).merge(s)
	a.rows += s.n
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
	// Headlines are the final and peak test mean@k of each run added with
	// AddRun that has a test evaluation, whatever the grouping.
	Headlines []Headline
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
//
// The arithmetic is that of metrics.Accumulator, per (group, task) pair
// and then per group over its tasks in task order: mean@k, pass@k
// (metrics.PassAtK), turns and completion tokens as its Evals and
// Summaries compute them, and accuracy and prompt tokens as they would
// for rows whose reward is 1 when correct and whose tokens are the prompt
// tokens. A test holds the two together bit for bit.
func (a *Analyzer) Result() Result {
	r := Result{By: slices.Clone(a.by), K: a.k, Rows: a.rows, Files: a.files, Notes: slices.Clone(a.notes)}
	r.Groups = make([]Group, len(a.keys))
	for i := range r.Groups {
		r.Groups[i].Key = slices.Clone(a.keys[i][:len(a.by)])
	}
	// Each group's cells, in task order.
	byGroup := make([][]int32, len(a.keys))
	for i := range int32(a.nCells) {
		g := a.cell(i).group
		byGroup[g] = append(byGroup[g], i)
	}
	kmin, kmax, short := 0, 0, 0
	for gi, cells := range byGroup {
		slices.SortFunc(cells, func(x, y int32) int { return strings.Compare(a.tasks[a.cell(x).task], a.tasks[a.cell(y).task]) })
		g := &r.Groups[gi]
		var meanAtK, passAtK, turns, completion, accuracy, prompt float64
		for _, ci := range cells {
			c := a.cell(ci)
			n := int(c.n)
			k := a.k
			if k == 0 || n < k {
				k = n
			}
			// n ≥ k ≥ 1 and 0 ≤ correct ≤ n by construction.
			pass, _ := metrics.PassAtK(n, int(c.correct), k)
			nf := float64(n)
			meanAtK += c.reward.Sum() / nf
			passAtK += pass
			turns += float64(c.turns) / nf
			completion += float64(c.completion) / nf
			accuracy += float64(c.correct) / nf
			prompt += float64(c.prompt) / nf
			g.Episodes += n
			g.Failed += int(c.failed)
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
		t := float64(len(cells))
		g.Tasks = len(cells)
		g.MeanAtK, g.PassAtK, g.MeanTurns, g.MeanCompletionTokens = meanAtK/t, passAtK/t, turns/t, completion/t
		g.Accuracy, g.MeanPromptTokens = accuracy/t, prompt/t
		g.FailureRate = float64(g.Failed) / float64(g.Episodes)
	}
	switch {
	case a.k == 0 && kmin != kmax:
		r.Notes = append(r.Notes, fmt.Sprintf("tasks have different sample counts (n from %d to %d): pass@k uses k = n per task, so pass@k differs in meaning between groups; pass --k to fix k", kmin, kmax))
	case short > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("%d (group, task) pairs have fewer than k = %d samples and are scored with k = n", short, a.k))
	}
	slices.SortFunc(r.Groups, func(x, y Group) int { return a.compareKeys(x.Key, y.Key) })
	var notes []string
	r.Headlines, notes = a.headlines()
	r.Notes = append(r.Notes, notes...)
	return r
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
