package analysis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// RolloutsTable is the table whose files a stage must have to be analysed.
const RolloutsTable = "rollouts"

// scoreColumns are decoded from every file, in this order; the group
// columns are added only when the grouping needs them.
var scoreColumns = []string{"task_id", "reward", "correct", "error", "turns", "prompt_tokens", "completion_tokens"}

// Indexes of the score columns in a record batch.
const (
	colTask = iota
	colReward
	colCorrect
	colError
	colTurns
	colPrompt
	colCompletion
)

// localReadSize is how much of a column chunk of a local file is read at
// once.
const localReadSize = 32 << 10

// batchRows is the rows decoded per Arrow record batch: a batch of the
// score columns is a few MB, whatever else the rows hold.
const batchRows = 8 * 1024

// File is one rollouts Parquet file to read.
type File struct {
	// Name is how errors and logs call the file.
	Name string
	R    io.ReaderAt
	Size int64
	// Labels say where the file sits (see Labels).
	Labels Labels
}

// AddRun reads the rollouts of every committed stage of run that has a
// rollouts table (rollout and evaluate stages), labelled with the run's
// schedule. It returns how many stages it read; a run with none gets a note.
// The files of all the run's stages are read together, in parallel.
func (a *Analyzer) AddRun(ctx context.Context, s *storage.Store, run, sched string) (int, error) {
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		return 0, fmt.Errorf("list stages of run %s: %w", run, err)
	}
	n := 0
	var files []File
	for _, m := range ms {
		entries := m.Table(RolloutsTable)
		if len(entries) == 0 {
			continue
		}
		n++
		l := Labels{Run: run, Schedule: sched, Position: m.Position, Stage: m.Stage}
		for _, f := range entries {
			ra, err := m.OpenFile(ctx, s, f)
			if err != nil {
				return n, err
			}
			files = append(files, File{Name: fmt.Sprintf("%s/%s", s.URL(), m.FileKey(f)), R: ra, Size: ra.Size(), Labels: l})
		}
	}
	if n == 0 {
		a.Note("run %s has no committed stage with rollouts yet", run)
		return 0, nil
	}
	if err := a.AddFiles(ctx, files); err != nil {
		return n, err
	}
	return n, a.addRunTests(ctx, run, files)
}

// AddFile reads one rollouts Parquet file; name is how errors call it.
// The file is validated against the rollouts table first, so a missing
// column is an error naming the file and the column, never zero values.
func (a *Analyzer) AddFile(ctx context.Context, name string, ra io.ReaderAt, size int64, l Labels) error {
	return a.AddFiles(ctx, []File{{Name: name, R: ra, Size: size, Labels: l}})
}

// AddFiles reads rollouts Parquet files as AddFile does, their row groups
// in parallel on GOMAXPROCS workers. Each worker decodes only the needed
// columns of one row group into Arrow arrays and sums them per (group,
// task) pair; the sums of row groups are merged in file and row-group
// order, so the result does not depend on the number of workers. Memory
// stays at a few batches per worker and the sums of the pairs, whatever
// the number of rows. It stops at the first file, in order, that fails,
// and returns its error; rows of earlier files are counted.
func (a *Analyzer) AddFiles(ctx context.Context, files []File) error {
	if len(files) == 0 {
		return nil
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := runtime.GOMAXPROCS(0)
	// window bounds the row groups being read or waiting to be merged,
	// and so the partial sums held at once, to one per worker. (One more
	// would let a worker start a row group while the merge waits for an
	// earlier one; a worker rarely waits, and memory is the scarcer.)
	window := make(chan struct{}, workers)
	jobs := make(chan *job)
	ordered := make(chan *job, workers)

	mem := &bufferPool{}
	parts := &partialPool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := scanner{parts: parts}
			for j := range jobs {
				j.part, j.err = s.scan(ctx, j.src, j.rowGroup)
				close(j.done)
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(jobs)
		a.dispatch(ctx, files, mem, window, jobs, ordered)
	}()

	var err error
	for j := range ordered {
		<-j.done
		if err == nil {
			if err = a.finish(j, parts); err != nil {
				// Let the dispatcher and the workers run out; what they
				// still hand over is dropped.
				cancel()
			}
		}
		<-window
	}
	wg.Wait()
	if err == nil {
		// The dispatch stops early only when cancelled.
		err = parent.Err()
	}
	return err
}

// job is one row group of a file to read, or, with rowGroup -1, the end
// of a file (or the error that kept it from being read).
type job struct {
	src      *source
	rowGroup int
	done     chan struct{}
	part     *partial
	err      error
}

// finish merges a job's work into a, in order.
func (a *Analyzer) finish(j *job, parts *partialPool) error {
	if j.err != nil {
		return j.err
	}
	if j.rowGroup < 0 {
		a.files++
		slog.Debug("analysed rollouts", "file", j.src.name, "rows", j.src.rows)
		return nil
	}
	j.src.rows += j.part.rows
	a.merge(j.src, j.part)
	parts.put(j.part)
	j.part = nil
	return nil
}

// dispatch opens the files in order and hands out their row groups, then
// an end-of-file job per file, in order on ordered and to the workers on
// jobs. A file that cannot be opened ends the dispatch with a job holding
// its error.
func (a *Analyzer) dispatch(ctx context.Context, files []File, mem memory.Allocator, window chan struct{}, jobs, ordered chan<- *job) {
	send := func(j *job, work bool) bool {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		ordered <- j
		if work {
			jobs <- j
		}
		return true
	}
	for _, f := range files {
		src, err := a.open(f, mem)
		if err == nil {
			for rg := range src.pf.NumRowGroups() {
				if !send(&job{src: src, rowGroup: rg, done: make(chan struct{})}, true) {
					return
				}
			}
		} else {
			src = &source{name: f.Name}
		}
		end := &job{src: src, rowGroup: -1, done: make(chan struct{}), err: err}
		close(end.done)
		if !send(end, false) || err != nil {
			return
		}
	}
}

// source is an open rollouts file. Closing the file.Reader would close
// nothing: the caller owns the io.ReaderAt.
type source struct {
	name   string
	pf     *file.Reader
	fr     *pqarrow.FileReader
	plan   readPlan
	leaves []int
	rows   int64 // merged so far
}

// open validates f against the rollouts table and opens it for reading.
func (a *Analyzer) open(f File, mem memory.Allocator) (*source, error) {
	ra, err := newTailReader(f.R, f.Size)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name, err)
	}
	if err := schemas.Validate(ra, f.Size, schemas.Rollouts); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	props := parquet.NewReaderProperties(mem)
	if _, local := f.R.(*os.File); local {
		// A local file is read a piece at a time rather than a column
		// chunk at a time: reads are cheap there, and memory is not
		// (a chunk of random floats hardly compresses). A bucket's file
		// is read a chunk per request.
		props.BufferedStreamEnabled = true
		props.BufferSize = localReadSize
	}
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, f.Size), file.WithReadProps(props))
	if err != nil {
		return nil, fmt.Errorf("read %s: open parquet file: %w", f.Name, err)
	}
	src := &source{name: f.Name, pf: pf}
	l := f.Labels
	if l.Stage == "" && a.needs(DimStage) {
		// Files written by whale's stages say where they come from.
		for _, kv := range pf.MetaData().KeyValueMetadata() {
			if kv.GetKey() == "whale.stage" {
				l.Stage = kv.GetValue()
			}
		}
	}
	src.plan = a.plan(l)
	// Row groups are read in parallel, so each one's columns are read in
	// turn.
	arrowProps := pqarrow.ArrowReadProperties{BatchSize: batchRows, Parallel: false}
	if src.fr, err = pqarrow.NewFileReader(pf, arrowProps, mem); err != nil {
		return nil, fmt.Errorf("read %s: open parquet file: %w", f.Name, err)
	}
	if src.leaves, err = leafColumns(src.fr.Manifest, src.plan.columns); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name, err)
	}
	return src, nil
}

// leafColumns maps the top-level columns to their Parquet leaf columns;
// every column read is a plain (leaf) column, as Validate has checked.
func leafColumns(m *pqarrow.SchemaManifest, columns []string) ([]int, error) {
	leaves := make([]int, len(columns))
	for i, name := range columns {
		j := slices.IndexFunc(m.Fields, func(f pqarrow.SchemaField) bool { return f.Field.Name == name })
		if j < 0 || !m.Fields[j].IsLeaf() {
			return nil, fmt.Errorf("column %q: not a plain column of the file", name)
		}
		leaves[i] = m.Fields[j].ColIndex
	}
	return leaves, nil
}

func (a *Analyzer) needs(d string) bool { return slices.Contains(a.by, d) }

// readPlan says, for one file, which columns to decode and where each
// group value comes from.
type readPlan struct {
	// columns are scoreColumns, then the group columns read from the rows.
	columns []string
	// vary are the indexes into columns of the group columns read per row
	// (task_id may be one of them).
	vary []int
	// fixed holds the values that are the same for every row of the file;
	// for a derived value, the position it derives from.
	fixed groupKey
	// from[j] is the index into vary that group value j is read from, or
	// -1 when it is fixed.
	from []int
	// derived[j] is true when group value j is the round or section of a
	// position.
	derived []bool
}

// plan is the readPlan of a file with labels l. It reads no state that
// merging changes: files are opened while row groups are merged.
func (a *Analyzer) plan(l Labels) readPlan {
	p := readPlan{columns: slices.Clone(scoreColumns), from: make([]int, len(a.by)), derived: make([]bool, len(a.by))}
	column := func(name string) int {
		c := slices.Index(p.columns, name)
		if c < 0 {
			p.columns = append(p.columns, name)
			c = len(p.columns) - 1
		}
		v := slices.Index(p.vary, c)
		if v < 0 {
			p.vary = append(p.vary, c)
			v = len(p.vary) - 1
		}
		return v
	}
	for j, d := range a.by {
		p.from[j] = -1
		switch d {
		case DimRun:
			if l.Run == "" {
				p.from[j] = column("run")
			}
			p.fixed[j] = l.Run
		case DimSchedule:
			p.fixed[j] = l.Schedule
		case DimStage:
			p.fixed[j] = l.Stage
		case DimPosition:
			if l.Position == "" {
				p.from[j] = column("position")
			}
			p.fixed[j] = l.Position
		case DimRound, DimSection:
			p.derived[j] = true
			if l.Position == "" {
				p.from[j] = column("position")
			}
			p.fixed[j] = l.Position
		case DimHarness, DimModel, DimTask:
			p.from[j] = column(d)
		}
	}
	return p
}

// merge adds the sums of one row group to a. The partial's strings are
// its own, so the groups and cells may keep them.
func (a *Analyzer) merge(src *source, p *partial) {
	p2g := make([]int32, len(p.groups))
	for lg, ids := range p.groups {
		k := src.plan.fixed
		for j, d := range a.by {
			if v := src.plan.from[j]; v >= 0 {
				k[j] = p.strs[ids[v]]
			}
			if src.plan.derived[j] {
				pi := a.position(k[j])
				k[j] = pi.round
				if d == DimSection {
					k[j] = pi.section
				}
			}
		}
		p2g[lg] = a.group(k)
	}
	p2t := slices.Repeat([]int32{-1}, len(p.strs))
	for i := range p.cells {
		c := &p.cells[i]
		t := p2t[c.task]
		if t < 0 {
			t = a.task(p.strs[c.task])
			p2t[c.task] = t
		}
		a.addCell(p2g[c.group], t, &c.sums)
	}
}

// tailBytes is how much of a file's end one read fetches: the footer of a
// rollouts file fits, so validating and opening it cost one request.
const tailBytes = 64 << 10

// tailReader serves reads of the last bytes of a file from memory.
type tailReader struct {
	io.ReaderAt
	off  int64
	tail []byte
}

func newTailReader(ra io.ReaderAt, size int64) (*tailReader, error) {
	n := min(size, tailBytes)
	t := &tailReader{ReaderAt: ra, off: size - n, tail: make([]byte, n)}
	if n == 0 {
		return t, nil
	}
	if got, err := ra.ReadAt(t.tail, t.off); got < len(t.tail) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return t, nil
}

func (t *tailReader) ReadAt(p []byte, off int64) (int, error) {
	if off < t.off || off-t.off > int64(len(t.tail)) {
		return t.ReaderAt.ReadAt(p, off)
	}
	n := copy(p, t.tail[off-t.off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
