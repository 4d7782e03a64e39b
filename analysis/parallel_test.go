package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/schemas"
)

// randomRows are rollouts with fractional rewards, several positions,
// harnesses and models, tasks with different sample counts and failures,
// in no particular order.
func randomRows(rng *rand.Rand, n int) []schemas.Rollout {
	rows := make([]schemas.Rollout, n)
	for i := range rows {
		task := fmt.Sprintf("t%03d", rng.IntN(60))
		r := ep([]string{"r001-w01", "r001-w02", "r001-h01", "r002-wt", "warmup"}[rng.IntN(5)], []string{h1, h2}[rng.IntN(2)], task,
			rng.Float64(), rng.IntN(3) == 0, int32(rng.IntN(9)), int64(rng.IntN(5000)), int64(rng.IntN(700)), "")
		r.ModelID = []string{"m", "m2"}[rng.IntN(2)]
		r.Run = []string{"exp", "exp2"}[rng.IntN(2)]
		if rng.IntN(13) == 0 {
			r.Error = "model: 500"
		}
		rows[i] = r
	}
	return rows
}

// reference scores rows as `whale analyze` did before it read in
// parallel: each row through two metrics.Accumulators, keyed per group.
// Files are loose, labelled by their rows and their whale.stage.
func reference(t *testing.T, opts Options, files []string) []Group {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	scores, costs := metrics.NewAccumulator(opts.K), metrics.NewAccumulator(opts.K)
	index := map[string]int{}
	var keys [][]string
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		info, err := schemas.FileInfo(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		err = schemas.ReadRows(context.Background(), f, st.Size(), func(r schemas.Rollout) error {
			k := []string{}
			for _, d := range a.by {
				k = append(k, map[string]string{DimRun: r.Run, DimSchedule: "", DimPosition: r.Position,
					DimRound: a.position(r.Position).round, DimSection: a.position(r.Position).section,
					DimStage: info.Metadata["whale.stage"], DimHarness: r.HarnessID, DimModel: r.ModelID, DimTask: r.TaskID}[d])
			}
			g, ok := index[strings.Join(k, "\x00")]
			if !ok {
				g = len(keys)
				index[strings.Join(k, "\x00")] = g
				keys = append(keys, k)
			}
			id := strconv.Itoa(g)
			var errText string
			if r.Error != "" {
				errText = "failed"
			}
			scores.Add(schemas.Rollout{HarnessID: id, TaskID: r.TaskID, Reward: r.Reward, Correct: r.Correct, Error: errText,
				Turns: r.Turns, CompletionTokens: r.CompletionTokens})
			acc := 0.0
			if r.Correct {
				acc = 1
			}
			costs.Add(schemas.Rollout{HarnessID: id, TaskID: r.TaskID, Reward: acc, PromptTokens: r.PromptTokens})
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	groups := make([]Group, len(keys))
	for i := range groups {
		groups[i].Key = keys[i]
	}
	for _, ev := range scores.Evals() {
		g := &groups[must(strconv.Atoi(ev.HarnessID))]
		if g.KMin == 0 || int(ev.K) < g.KMin {
			g.KMin = int(ev.K)
		}
		g.KMax = max(g.KMax, int(ev.K))
	}
	for _, s := range scores.Summaries() {
		g := &groups[must(strconv.Atoi(s.HarnessID))]
		g.Episodes, g.Tasks, g.Failed = s.Episodes, s.Tasks, s.Failed
		g.MeanAtK, g.PassAtK, g.MeanTurns, g.MeanCompletionTokens = s.MeanAtK, s.PassAtK, s.MeanTurns, s.MeanTokens
		g.FailureRate = float64(s.Failed) / float64(s.Episodes)
	}
	for _, s := range costs.Summaries() {
		g := &groups[must(strconv.Atoi(s.HarnessID))]
		g.Accuracy, g.MeanPromptTokens = s.MeanAtK, s.MeanTokens
	}
	slices.SortFunc(groups, func(x, y Group) int { return a.compareKeys(x.Key, y.Key) })
	return groups
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// withProcs runs fn with GOMAXPROCS n, the number of workers AddFiles
// starts.
func withProcs(n int, fn func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	fn()
}

// The columnar sums give what the per-row metrics.Accumulator gives, bit
// for bit, for every grouping and k: the scores mean one thing everywhere.
func TestAnalyzeMatchesMetrics(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	big := schemas.WriterOptions{RowGroupRows: 1 << 20}
	files := []string{
		writeFile(t, dir, "a.parquet", map[string]string{"whale.stage": "rollout"}, big, randomRows(rng, 3000)),
		writeFile(t, dir, "b.parquet", map[string]string{"whale.stage": "evaluate"}, big, randomRows(rng, 1000)),
	}
	for _, opts := range []Options{
		{}, {By: []string{DimPosition}}, {By: []string{DimRound, DimHarness}, K: 4}, {By: []string{}},
		{By: []string{DimTask}}, {By: []string{DimSection, DimModel, DimRun}, K: 2}, {By: []string{DimStage, DimHarness, DimTask}},
	} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			got := analyse(t, opts, files)
			if want := reference(t, opts, files); !reflect.DeepEqual(got.Groups, want) {
				t.Fatalf("groups differ from metrics.Accumulator's:\n got  %+v\n want %+v", got.Groups[:min(2, len(got.Groups))], want[:min(2, len(want))])
			}
		})
	}
}

// Many files of many row groups give the same bits whatever the number of
// workers, and the per-row scores to rounding.
func TestAnalyzeParallelDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	var files []string
	for i := range 6 {
		files = append(files, writeFile(t, dir, fmt.Sprintf("p%d.parquet", i), nil,
			schemas.WriterOptions{RowGroupRows: int64(97 + 50*i)}, randomRows(rng, 700+300*i)))
	}
	opts := Options{By: []string{DimPosition, DimHarness}, K: 3}
	var ref Result
	withProcs(1, func() { ref = analyse(t, opts, files) })
	for _, procs := range []int{2, 3, 8} {
		withProcs(procs, func() {
			for range 3 {
				if got := analyse(t, opts, files); !reflect.DeepEqual(got, ref) {
					t.Fatalf("%d workers: %+v\nwant %+v", procs, got.Groups[0], ref.Groups[0])
				}
			}
		})
	}
	want := reference(t, opts, files)
	if ref.Rows != 6*700+300*15 || ref.Files != 6 || len(ref.Groups) != len(want) {
		t.Fatalf("rows %d files %d groups %d, want %d groups", ref.Rows, ref.Files, len(ref.Groups), len(want))
	}
	checkGroups(t, ref.Groups, want)
}

// AddFiles stops at the first file, in order, that cannot be read, and
// says which.
func TestAddFilesFirstError(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.parquet", nil, schemas.WriterOptions{RowGroupRows: 3}, weightRows())
	garbage := filepath.Join(dir, "garbage.parquet")
	if err := os.WriteFile(garbage, []byte("not parquet, not even close to it"), 0o644); err != nil {
		t.Fatal(err)
	}
	var tasks bytes.Buffer
	w, err := schemas.NewWriter[schemas.Task](&tasks, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(schemas.Task{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	open := func(path string) File {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		st, _ := f.Stat()
		return File{Name: path, R: f, Size: st.Size()}
	}
	tasksFile := File{Name: "tasks.parquet", R: bytes.NewReader(tasks.Bytes()), Size: int64(tasks.Len())}
	for range 5 {
		a, _ := New(Options{})
		err := a.AddFiles(context.Background(), []File{open(good), tasksFile, open(good), open(garbage)})
		if err == nil || !errors.Is(err, schemas.ErrSchemaMismatch) || !strings.Contains(err.Error(), "tasks.parquet") {
			t.Fatalf("error %v, want the tasks file's schema mismatch", err)
		}
		if r := a.Result(); r.Files != 1 || r.Rows != 8 {
			t.Errorf("before the bad file: %d files, %d rows", r.Files, r.Rows)
		}
	}
	a, _ := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.AddFiles(ctx, []File{open(good)}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// countingReader counts the reads of the last 8 bytes of a file, where
// its footer's length sits.
type countingReader struct {
	io.ReaderAt
	size        int64
	reads, tail atomic.Int32
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	if off+int64(len(p)) > c.size-8 {
		c.tail.Add(1)
	}
	return c.ReaderAt.ReadAt(p, off)
}

// A file in a bucket costs one request for its footer, however many times
// it is validated and opened, and then its columns' chunks.
func TestAddFileReadsFooterOnce(t *testing.T) {
	path := writeFile(t, t.TempDir(), "w.parquet", nil, schemas.WriterOptions{RowGroupRows: 4}, weightRows())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &countingReader{ReaderAt: bytes.NewReader(data), size: int64(len(data))}
	a, _ := New(Options{By: []string{DimStage, DimPosition}})
	if err := a.AddFile(context.Background(), "w", c, c.size, Labels{}); err != nil {
		t.Fatal(err)
	}
	// 2 row groups × 8 columns (7 scores and the position).
	if c.tail.Load() != 1 || c.reads.Load() > 1+2*8 {
		t.Errorf("%d reads, %d of the footer", c.reads.Load(), c.tail.Load())
	}
	checkGroups(t, a.Result().Groups, []Group{with(wantW, "", "r001-w01")})
}

func TestBufferPool(t *testing.T) {
	var p bufferPool
	aligned := func(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%alignment == 0 }
	b := p.Allocate(100)
	if len(b) != 100 || cap(b) != 128 || !aligned(b) {
		t.Fatalf("len %d cap %d aligned %v", len(b), cap(b), aligned(b))
	}
	for i := range b {
		b[i] = 0xff
	}
	b = p.Reallocate(120, b)
	if len(b) != 120 || b[99] != 0xff || b[100] != 0 || b[119] != 0 {
		t.Fatalf("reallocated in place: len %d, %x %x", len(b), b[99], b[100:])
	}
	b = p.Reallocate(1000, b)
	if len(b) != 1000 || cap(b) != 1024 || b[0] != 0xff || b[99] != 0xff || b[100] != 0 || b[999] != 0 || !aligned(b) {
		t.Fatalf("reallocated: len %d cap %d", len(b), cap(b))
	}
	p.Free(b)
	again := p.Allocate(600)
	if unsafe.SliceData(again) != unsafe.SliceData(b) || slices.ContainsFunc(again, func(x byte) bool { return x != 0 }) {
		t.Fatalf("a freed buffer is reused, zeroed")
	}
	p.Free(make([]byte, 1024)[3:]) // not one of the pool's: ignored
	if n := len(p.free[bufferClass(1024)]); n != 0 {
		t.Errorf("%d foreign buffers pooled", n)
	}
	if z := p.Allocate(0); len(z) != 0 {
		t.Errorf("Allocate(0) = %d bytes", len(z))
	}
}

// liveHeap is the heap marked live by the last GC.
func liveHeap() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// peakLive runs fn and returns the most heap a GC found live meanwhile,
// above what was live before: what fn needs, whatever garbage it leaves
// between collections. It collects often, so as to see.
func peakLive(fn func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	// Twice: the first leaves sync.Pools (a Parquet writer's, say) to
	// the second.
	runtime.GC()
	runtime.GC()
	base := liveHeap()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			peak = max(peak, liveHeap())
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	peak := <-done
	if peak < base {
		return 0
	}
	return peak - base
}

// The memory the analysis needs does not grow with rows: ten copies of a
// file (the same groups and tasks) need what two do, give or take a batch.
func TestAnalyzeMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 500k rows")
	}
	const n = 50_000
	rows := make([]schemas.Rollout, n)
	for i := range rows {
		rows[i] = ep(fmt.Sprintf("r001-w%02d", 1+i%4), h1, fmt.Sprintf("task-%05d", i/8%5000), float64(i%5)/4, i%5 == 4, 3, 300, 40, "")
	}
	path := writeFile(t, t.TempDir(), "flat.parquet", nil, schemas.WriterOptions{RowGroupRows: 8 * 1024}, rows)
	rows = nil
	peak := func(copies int) uint64 {
		var files []File
		for i := range copies {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			files = append(files, File{Name: fmt.Sprint(path, i), R: f, Size: st.Size()})
		}
		var r Result
		p := peakLive(func() {
			a, _ := New(Options{By: []string{DimPosition}})
			if err := a.AddFiles(context.Background(), files); err != nil {
				t.Fatal(err)
			}
			r = a.Result()
		})
		if r.Rows != int64(copies*n) || r.Groups[0].Tasks != 5000 {
			t.Fatalf("%d copies: %d rows, %d tasks", copies, r.Rows, r.Groups[0].Tasks)
		}
		return p
	}
	two, ten := peak(2), peak(10)
	t.Logf("peak live heap: %.1f MB for %d rows, %.1f MB for %d", float64(two)/(1<<20), 2*n, float64(ten)/(1<<20), 10*n)
	// Growing with the rows would add some 4x the first peak (~40 MB);
	// 8 MB leaves room for the sampler on a loaded machine (9.8 -> 13.9
	// MB was seen there) and still tells the two apart.
	if ten > two+8<<20 {
		t.Errorf("live heap grew with rows: %.1f MB, then %.1f MB", float64(two)/(1<<20), float64(ten)/(1<<20))
	}
}
