package analysis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// RolloutsTable is the table whose files a stage must have to be analysed.
const RolloutsTable = "rollouts"

// scoreColumns are decoded from every file; the group columns are added
// only when the grouping needs them.
var scoreColumns = []string{"task_id", "reward", "correct", "error", "turns", "prompt_tokens", "completion_tokens"}

// AddRun reads the rollouts of every committed stage of run that has a
// rollouts table (rollout and evaluate stages), labelled with the run's
// schedule. It returns how many stages it read; a run with none gets a note.
func (a *Analyzer) AddRun(ctx context.Context, s *storage.Store, run, sched string) (int, error) {
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		return 0, fmt.Errorf("list stages of run %s: %w", run, err)
	}
	n := 0
	for _, m := range ms {
		files := m.Table(RolloutsTable)
		if len(files) == 0 {
			continue
		}
		n++
		l := Labels{Run: run, Schedule: sched, Position: m.Position, Stage: m.Stage}
		for _, f := range files {
			ra, err := m.OpenFile(ctx, s, f)
			if err != nil {
				return n, err
			}
			name := fmt.Sprintf("%s/%s", s.URL(), m.FileKey(f))
			if err := a.AddFile(ctx, name, ra, ra.Size(), l); err != nil {
				return n, err
			}
		}
	}
	if n == 0 {
		a.Note("run %s has no committed stage with rollouts yet", run)
	}
	return n, nil
}

// AddFile reads one rollouts Parquet file; name is how errors call it.
// The file is validated against the rollouts table first, so a missing
// column is an error naming the file and the column, never zero values.
func (a *Analyzer) AddFile(ctx context.Context, name string, ra io.ReaderAt, size int64, l Labels) error {
	if err := schemas.Validate(ra, size, schemas.Rollouts); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if l.Stage == "" && a.needs(DimStage) {
		// Files written by whale's stages say where they come from.
		info, err := schemas.FileInfo(ra, size)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		l.Stage = info.Metadata["whale.stage"]
	}
	plan := a.plan(l)
	before := a.rows
	err := schemas.ReadColumns(ctx, ra, size, plan.columns, func(rec arrow.RecordBatch) error {
		return a.addBatch(plan, rec)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	a.files++
	slog.Debug("analysed rollouts", "file", name, "rows", a.rows-before)
	return nil
}

func (a *Analyzer) needs(d string) bool { return slices.Contains(a.by, d) }

// readPlan says, for one file, which columns to decode and where each
// group value comes from.
type readPlan struct {
	columns []string
	fixed   groupKey // values that are the same for every row of the file
	// fromColumn[j] is the column index (into columns) that group value j
	// is read from, or -1 when it is fixed.
	fromColumn []int
	// derived[j] is true when group value j is the round or section of the
	// position read from fromColumn[j].
	derived []bool
}

func (a *Analyzer) plan(l Labels) readPlan {
	p := readPlan{columns: slices.Clone(scoreColumns), fromColumn: make([]int, len(a.by)), derived: make([]bool, len(a.by))}
	column := func(name string) int {
		if i := slices.Index(p.columns, name); i >= 0 {
			return i
		}
		p.columns = append(p.columns, name)
		return len(p.columns) - 1
	}
	for j, d := range a.by {
		p.fromColumn[j] = -1
		switch d {
		case DimRun:
			if l.Run == "" {
				p.fromColumn[j] = column("run")
			}
			p.fixed[j] = l.Run
		case DimSchedule:
			p.fixed[j] = l.Schedule
		case DimStage:
			p.fixed[j] = l.Stage
		case DimPosition:
			if l.Position == "" {
				p.fromColumn[j] = column("position")
			}
			p.fixed[j] = l.Position
		case DimRound, DimSection:
			if l.Position == "" {
				p.fromColumn[j] = column("position")
				p.derived[j] = true
			} else {
				pi := a.position(l.Position)
				p.fixed[j] = pi.round
				if d == DimSection {
					p.fixed[j] = pi.section
				}
			}
		case DimHarness, DimModel, DimTask:
			p.fromColumn[j] = column(d)
		}
	}
	return p
}

func (a *Analyzer) addBatch(p readPlan, rec arrow.RecordBatch) error {
	col := func(i int) arrow.Array { return rec.Column(i) }
	task, err := stringsOf(col(0))
	if err != nil {
		return fmt.Errorf("column task_id: %w", err)
	}
	reward, err := floatsOf(col(1))
	if err != nil {
		return fmt.Errorf("column reward: %w", err)
	}
	correct, err := boolsOf(col(2))
	if err != nil {
		return fmt.Errorf("column correct: %w", err)
	}
	errText, err := stringsOf(col(3))
	if err != nil {
		return fmt.Errorf("column error: %w", err)
	}
	turns, err := intsOf(col(4))
	if err != nil {
		return fmt.Errorf("column turns: %w", err)
	}
	prompt, err := intsOf(col(5))
	if err != nil {
		return fmt.Errorf("column prompt_tokens: %w", err)
	}
	complete, err := intsOf(col(6))
	if err != nil {
		return fmt.Errorf("column completion_tokens: %w", err)
	}
	type varying struct {
		j       int
		get     func(int) string
		derived string // "", DimRound or DimSection
	}
	var vary []varying
	for j, c := range p.fromColumn {
		if c < 0 {
			continue
		}
		get, err := stringsOf(col(c))
		if err != nil {
			return fmt.Errorf("column %s: %w", p.columns[c], err)
		}
		v := varying{j: j, get: get}
		if p.derived[j] {
			v.derived = a.by[j]
		}
		vary = append(vary, v)
	}
	k := p.fixed
	for i := range int(rec.NumRows()) {
		for _, v := range vary {
			s := v.get(i)
			switch v.derived {
			case DimRound:
				s = a.position(s).round
			case DimSection:
				s = a.position(s).section
			}
			k[v.j] = s
		}
		a.add(&k, episode{
			task:     task(i),
			reward:   reward(i),
			correct:  correct(i),
			failed:   errText(i) != "",
			turns:    int32(turns(i)),
			prompt:   prompt(i),
			complete: complete(i),
		})
	}
	return nil
}

// The accessors below read one column of any layout schemas.Validate
// accepts; a null reads as the zero value, as in schemas.ReadRows.

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
