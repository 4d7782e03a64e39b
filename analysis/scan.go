package analysis

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/whalerun/whale/schemas"
)

// partial is what a worker makes of one row group: the sums of its
// (group, task) pairs, with group values and tasks as ids into its own
// table of strings.
type partial struct {
	strs []string
	// groups hold, per local group, the string ids of its varying values
	// in the order of readPlan.vary.
	groups [][maxDims]int32
	cells  []localCell
	rows   int64
}

type localCell struct {
	group, task int32
	sums
}

// partialPool recycles partials once merged: a row group's cells are
// then written into the memory of an earlier one's.
type partialPool struct {
	mu   sync.Mutex
	free []*partial
}

func (pp *partialPool) get() *partial {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free = pp.free[:n-1]
		return p
	}
	return &partial{}
}

// put takes back a merged partial; the Analyzer keeps its strings, not
// its slices.
func (pp *partialPool) put(p *partial) {
	clear(p.strs)
	p.strs, p.groups, p.cells, p.rows = p.strs[:0], p.groups[:0], p.cells[:0], 0
	pp.mu.Lock()
	pp.free = append(pp.free, p)
	pp.mu.Unlock()
}

// scanner turns row groups into partials. Each worker has one and reuses
// its tables and buffers; it is not safe for concurrent use.
type scanner struct {
	parts  *partialPool
	p      *partial
	strIDs idTable
	// single maps a string id to its local group when one column varies;
	// groupIDs does when several do.
	single   []int32
	groupIDs map[[maxDims]int32]int32
	cellIDs  idTable

	// recent caches the cells of the last rows by hash: a rollout file
	// interleaves the samples of the few tasks running at once, so most
	// rows find their cell here, in memory the batch has just brought
	// into cache. Its strings alias the batch, so it is cleared per batch.
	recent [256]recentCell

	cellOf     []int32
	i64s       [3][]int64
	f64s       []float64
	flags      [2][]bool
	varyValues []func(int) string
}

// scan reads one row group of src.
func (s *scanner) scan(ctx context.Context, src *source, rg int) (*partial, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.reset()
	rr, err := src.fr.GetRecordReader(ctx, src.leaves, []int{rg})
	if err != nil {
		return nil, fmt.Errorf("read %s: row group %d: %w", src.name, rg, err)
	}
	defer rr.Release()
	// Map the batch's columns to the plan's by name.
	order := make([]int, len(src.plan.columns))
	for i, name := range src.plan.columns {
		idx := rr.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("read %s: column %q not read", src.name, name)
		}
		order[i] = idx[0]
	}
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.batch(&src.plan, rr.RecordBatch(), order); err != nil {
			return nil, fmt.Errorf("read %s: row group %d: %w", src.name, rg, err)
		}
	}
	if err := rr.Err(); err != nil {
		return nil, fmt.Errorf("read %s: row group %d: %w", src.name, rg, err)
	}
	p := s.p
	s.p = nil
	return p, nil
}

func (s *scanner) reset() {
	s.p = s.parts.get()
	if s.groupIDs == nil {
		s.groupIDs = make(map[[maxDims]int32]int32)
	}
	s.strIDs.reset()
	clear(s.groupIDs)
	s.cellIDs.reset()
	s.single = s.single[:0]
}

// id interns a string that may alias a batch's buffers.
func (s *scanner) id(v string) int32 { return s.idHashed(v, hashString(v)) }

// idHashed is id for a string whose hashString is h.
func (s *scanner) idHashed(v string, h uint64) int32 {
	strs := s.p.strs
	id, slot := s.strIDs.find(h, func(i int32) bool { return strs[i] == v })
	if id >= 0 {
		return id
	}
	id = int32(len(strs))
	s.p.strs = append(strs, strings.Clone(v))
	s.strIDs.insert(slot, func(i int32) uint64 { return hashString(s.p.strs[i]) })
	return id
}

// group returns the local group of the varying values ids (n of them).
func (s *scanner) group(ids *[maxDims]int32, n int) int32 {
	switch n {
	case 0:
		if len(s.p.groups) == 0 {
			s.p.groups = append(s.p.groups, *ids)
		}
		return 0
	case 1:
		v := ids[0]
		for int(v) >= len(s.single) {
			s.single = append(s.single, -1)
		}
		if g := s.single[v]; g >= 0 {
			return g
		}
		g := int32(len(s.p.groups))
		s.p.groups = append(s.p.groups, *ids)
		s.single[v] = g
		return g
	}
	if g, ok := s.groupIDs[*ids]; ok {
		return g
	}
	g := int32(len(s.p.groups))
	s.p.groups = append(s.p.groups, *ids)
	s.groupIDs[*ids] = g
	return g
}

type recentCell struct {
	h    uint64
	g, c int32
	t    string
}

// cell returns the local cell of group g and task t, a string that may
// alias the batch's buffers.
func (s *scanner) cell(g int32, t string) int32 {
	ht := hashString(t)
	h := ht ^ groupHash(g)
	r := &s.recent[h%uint64(len(s.recent))]
	if r.h == h && r.g == g && r.t == t && r.c >= 0 {
		return r.c
	}
	cells, strs := s.p.cells, s.p.strs
	c, slot := s.cellIDs.find(h, func(i int32) bool { return cells[i].group == g && strs[cells[i].task] == t })
	if c < 0 {
		c = int32(len(cells))
		s.p.cells = append(cells, localCell{group: g, task: s.idHashed(t, ht)})
		s.cellIDs.insert(slot, func(i int32) uint64 {
			x := &s.p.cells[i]
			return hashString(s.p.strs[x.task]) ^ groupHash(x.group)
		})
	}
	*r = recentCell{h: h, g: g, c: c, t: t}
	return c
}

func groupHash(g int32) uint64 { return hashKey(uint64(uint32(g)) + 1) }

// batch adds one record batch: first the cell of each row from the task
// and group columns (consecutive rows of the same task and group, the
// common case, cost a string comparison each), then the score columns,
// each as one flat slice, summed into the cells.
func (s *scanner) batch(p *readPlan, rec arrow.RecordBatch, order []int) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	col := func(i int) arrow.Array { return rec.Column(order[i]) }
	task, err := stringsOf(col(colTask))
	if err != nil {
		return fmt.Errorf("column task_id: %w", err)
	}
	s.varyValues = s.varyValues[:0]
	for _, c := range p.vary {
		get, err := stringsOf(col(c))
		if err != nil {
			return fmt.Errorf("column %s: %w", p.columns[c], err)
		}
		s.varyValues = append(s.varyValues, get)
	}
	s.cellOf = grow(s.cellOf, n)
	for i := range s.recent {
		s.recent[i] = recentCell{c: -1}
	}
	var (
		ids      [maxDims]int32
		prev     [maxDims]string
		prevTask string
		g, c     int32
	)
	nv := len(s.varyValues)
	for i := range n {
		changed := i == 0
		for v, get := range s.varyValues {
			if x := get(i); i == 0 || x != prev[v] {
				prev[v], ids[v] = x, s.id(x)
				changed = true
			}
		}
		if changed {
			g = s.group(&ids, nv)
		}
		if t := task(i); changed || t != prevTask {
			prevTask = t
			c = s.cell(g, t)
		}
		s.cellOf[i] = c
	}

	reward, err := s.floats(col(colReward))
	if err != nil {
		return fmt.Errorf("column reward: %w", err)
	}
	correct, err := s.bools(0, col(colCorrect))
	if err != nil {
		return fmt.Errorf("column correct: %w", err)
	}
	failed, err := s.nonEmpty(1, col(colError))
	if err != nil {
		return fmt.Errorf("column error: %w", err)
	}
	turns, err := s.ints(0, col(colTurns))
	if err != nil {
		return fmt.Errorf("column turns: %w", err)
	}
	prompt, err := s.ints(1, col(colPrompt))
	if err != nil {
		return fmt.Errorf("column prompt_tokens: %w", err)
	}
	completion, err := s.ints(2, col(colCompletion))
	if err != nil {
		return fmt.Errorf("column completion_tokens: %w", err)
	}
	cells := s.p.cells
	reward, correct, failed, turns, prompt, completion = reward[:n], correct[:n], failed[:n], turns[:n], prompt[:n], completion[:n]
	for i, ci := range s.cellOf[:n] {
		x := &cells[ci].sums
		x.n++
		if correct[i] {
			x.correct++
		}
		if failed[i] {
			x.failed++
		}
		x.reward.Add(reward[i])
		// Turns are an int32 in the table, whatever width the file uses.
		x.turns += int64(int32(turns[i]))
		x.prompt += prompt[i]
		x.completion += completion[i]
	}
	s.p.rows += int64(n)
	return nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// The column readers below take any layout schemas.Validate accepts and
// return one flat slice per column, the batch's own buffer when it has
// the table's type and no nulls; a null reads as the zero value, as in
// schemas.ReadRows.

func (s *scanner) floats(arr arrow.Array) ([]float64, error) {
	if c, ok := arr.(*array.Float64); ok && c.NullN() == 0 {
		return c.Float64Values(), nil
	}
	get, err := floatsOf(arr)
	if err != nil {
		return nil, err
	}
	s.f64s = grow(s.f64s, arr.Len())
	for i := range s.f64s {
		s.f64s[i] = get(i)
	}
	return s.f64s, nil
}

func (s *scanner) ints(buf int, arr arrow.Array) ([]int64, error) {
	if c, ok := arr.(*array.Int64); ok && c.NullN() == 0 {
		return c.Int64Values(), nil
	}
	out := grow(s.i64s[buf], arr.Len())
	s.i64s[buf] = out
	if c, ok := arr.(*array.Int32); ok && c.NullN() == 0 {
		for i, v := range c.Int32Values() {
			out[i] = int64(v)
		}
		return out, nil
	}
	get, err := intsOf(arr)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = get(i)
	}
	return out, nil
}

func (s *scanner) bools(buf int, arr arrow.Array) ([]bool, error) {
	get, err := boolsOf(arr)
	if err != nil {
		return nil, err
	}
	out := grow(s.flags[buf], arr.Len())
	s.flags[buf] = out
	if c, ok := arr.(*array.Boolean); ok && c.NullN() == 0 {
		for i := range out {
			out[i] = c.Value(i)
		}
		return out, nil
	}
	for i := range out {
		out[i] = get(i)
	}
	return out, nil
}

// nonEmpty reports per row whether a string column holds a non-empty
// value (a null is empty).
func (s *scanner) nonEmpty(buf int, arr arrow.Array) ([]bool, error) {
	out := grow(s.flags[buf], arr.Len())
	s.flags[buf] = out
	if c, ok := arr.(*array.String); ok && c.NullN() == 0 {
		offs := c.ValueOffsets()
		for i := range out {
			out[i] = offs[i+1] != offs[i]
		}
		return out, nil
	}
	get, err := stringsOf(arr)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = get(i) != ""
	}
	return out, nil
}

// The accessors below read one value of any layout schemas.Validate
// accepts; a null reads as the zero value.

type nullable interface {
	NullN() int
	IsNull(int) bool
}

func orZero[T any](c nullable, get func(int) T) func(int) T {
	if c.NullN() == 0 {
		return get
	}
	return func(i int) T {
		if c.IsNull(i) {
			var zero T
			return zero
		}
		return get(i)
	}
}

func stringsOf(arr arrow.Array) (func(int) string, error) {
	switch c := arr.(type) {
	case *array.String:
		return orZero(c, c.Value), nil
	case *array.LargeString:
		return orZero(c, c.Value), nil
	case *array.StringView:
		return orZero(c, c.Value), nil
	}
	return nil, fmt.Errorf("want a string column, found %s", schemas.TypeString(arr.DataType()))
}

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

func widen[T number, R number](c nullable, get func(int) T) func(int) R {
	return orZero(c, func(i int) R { return R(get(i)) })
}

func intsOf(arr arrow.Array) (func(int) int64, error) {
	switch c := arr.(type) {
	case *array.Int64:
		return orZero(c, c.Value), nil
	case *array.Int32:
		return widen[int32, int64](c, c.Value), nil
	case *array.Int16:
		return widen[int16, int64](c, c.Value), nil
	case *array.Int8:
		return widen[int8, int64](c, c.Value), nil
	case *array.Uint64:
		return widen[uint64, int64](c, c.Value), nil
	case *array.Uint32:
		return widen[uint32, int64](c, c.Value), nil
	case *array.Uint16:
		return widen[uint16, int64](c, c.Value), nil
	case *array.Uint8:
		return widen[uint8, int64](c, c.Value), nil
	}
	return nil, fmt.Errorf("want an integer column, found %s", schemas.TypeString(arr.DataType()))
}

func floatsOf(arr arrow.Array) (func(int) float64, error) {
	switch c := arr.(type) {
	case *array.Float64:
		return orZero(c, c.Value), nil
	case *array.Float32:
		return widen[float32, float64](c, c.Value), nil
	case *array.Float16:
		return orZero(c, func(i int) float64 { return float64(c.Value(i).Float32()) }), nil
	}
	return nil, fmt.Errorf("want a floating-point column, found %s", schemas.TypeString(arr.DataType()))
}

func boolsOf(arr arrow.Array) (func(int) bool, error) {
	if c, ok := arr.(*array.Boolean); ok {
		return orZero(c, c.Value), nil
	}
	return nil, fmt.Errorf("want a bool column, found %s", schemas.TypeString(arr.DataType()))
}
