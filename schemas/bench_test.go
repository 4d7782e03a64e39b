package schemas

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// Benchmarks and the memory test use realistic rollouts (see rolloutGen).
// WHALE_BENCH_ROWS overrides the row count for a quick look.
const millionRows = 1_000_000

func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("WHALE_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return millionRows
}

// benchDir holds the benchmark's shared file; TestMain removes it.
var (
	benchMu   sync.Mutex
	benchDir  string
	benchFile string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// writeRollouts streams n generated rollouts into a new file at path.
func writeRollouts(path string, gen *rolloutGen, n int) (size int64, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := NewWriter[Rollout](bw, Rollouts, WriterOptions{})
	if err != nil {
		return 0, err
	}
	batch := make([]Rollout, 0, 1024)
	for i := range n {
		batch = append(batch, gen.row(i))
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.Write(batch...); err != nil {
				return 0, err
			}
			batch = batch[:0]
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), f.Close()
}

func logicalBytes(gen *rolloutGen, n int) int64 {
	var total int64
	for i := range n {
		r := gen.row(i)
		total += r.approxSize()
	}
	return total
}

// sharedRolloutFile returns a file of n rollouts, written once per process.
func sharedRolloutFile(b *testing.B, gen *rolloutGen, n int) (string, int64) {
	benchMu.Lock()
	defer benchMu.Unlock()
	if benchFile == "" {
		if benchDir == "" {
			dir, err := os.MkdirTemp("", "whale-schemas-bench-")
			if err != nil {
				b.Fatal(err)
			}
			benchDir = dir
		}
		path := filepath.Join(benchDir, "rollouts.parquet")
		if _, err := writeRollouts(path, gen, n); err != nil {
			b.Fatal(err)
		}
		benchFile = path
	}
	st, err := os.Stat(benchFile)
	if err != nil {
		b.Fatal(err)
	}
	return benchFile, st.Size()
}

// reportRows reports rows/s and the file size; wholeFile adds the rate over
// the file's bytes, which only means something when all of it is decoded.
// cpu is the process's user+system CPU time: on a shared machine, rows per
// CPU second says more than rows per wall second.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRows(b *testing.B, rows int, fileSize int64, wholeFile bool, cpuStart time.Duration) {
	b.ReportMetric((cpu()-cpuStart).Seconds()/float64(b.N), "cpu-s/op")
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(rows)*float64(b.N)/sec, "rows/s")
	b.ReportMetric(float64(fileSize)/1e6, "file-MB")
	if wholeFile {
		b.ReportMetric(float64(fileSize)*float64(b.N)/1e6/sec, "file-MB/s")
	}
}

// BenchmarkRollouts writes and reads a million realistic rollouts
// (run with -benchtime=1x). MB/s is uncompressed row data for write and
// typed read, decoded Arrow bytes for column reads.
func BenchmarkRollouts(b *testing.B) {
	n := benchRows()
	gen := newRolloutGen(4096)
	logical := logicalBytes(gen, n)

	b.Run("write", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "rollouts.parquet")
		b.SetBytes(logical)
		var size int64
		cpu0 := cpu()
		for b.Loop() {
			var err error
			if size, err = writeRollouts(path, gen, n); err != nil {
				b.Fatal(err)
			}
		}
		reportRows(b, n, size, true, cpu0)
	})

	b.Run("read_typed", func(b *testing.B) {
		path, size := sharedRolloutFile(b, gen, n)
		f := openBench(b, path)
		b.SetBytes(logical)
		cpu0 := cpu()
		for b.Loop() {
			var rows int
			var tokens int64
			err := ReadRows(context.Background(), f, size, func(r Rollout) error {
				rows++
				tokens += r.CompletionTokens + int64(len(r.Messages))
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if rows != n || tokens == 0 {
				b.Fatalf("read %d rows, want %d", rows, n)
			}
		}
		reportRows(b, n, size, true, cpu0)
	})

	for _, cols := range [][]string{
		{"task_id", "sample", "reward", "correct", "turns", "completion_tokens"},
		{"messages"},
	} {
		b.Run("read_columns_"+strings.Join(cols, "+"), func(b *testing.B) {
			path, size := sharedRolloutFile(b, gen, n)
			f := openBench(b, path)
			var decoded int64
			cpu0 := cpu()
			for b.Loop() {
				var rows int
				decoded = 0
				err := ReadColumns(context.Background(), f, size, cols, func(rec arrow.RecordBatch) error {
					rows += int(rec.NumRows())
					for _, c := range rec.Columns() {
						decoded += dataSize(c.Data())
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if rows != n {
					b.Fatalf("read %d rows, want %d", rows, n)
				}
			}
			b.SetBytes(decoded)
			reportRows(b, n, size, false, cpu0)
		})
	}
}

func openBench(b *testing.B, path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

func dataSize(d arrow.ArrayData) int64 {
	var n int64
	for _, buf := range d.Buffers() {
		if buf != nil {
			n += int64(buf.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataSize(c)
	}
	return n
}

// TestWriteMillionRowsFlatMemory writes a million realistic rollouts in a
// child process and checks the child's peak RSS, which only the kernel
// knows after the child exits.
func TestWriteMillionRowsFlatMemory(t *testing.T) {
	if path := os.Getenv("WHALE_CHILD_WRITE"); path != "" {
		childWrite(t, path)
		return
	}
	if testing.Short() {
		t.Skip("writes a million rollouts (about 15 s on 2 cores); runs without -short")
	}
	path := filepath.Join(t.TempDir(), "rollouts.parquet")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteMillionRowsFlatMemory$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "WHALE_CHILD_WRITE="+path)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "child:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatal("no rusage for the child")
	}
	peakMB := float64(ru.Maxrss) / 1024 // KiB on Linux
	t.Logf("peak RSS %.0f MB, %v in all", peakMB, time.Since(start).Round(time.Millisecond))
	if peakMB >= 300 {
		t.Errorf("peak RSS %.0f MB writing %d rows, want < 300 MB", peakMB, millionRows)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	info, err := FileInfo(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if info.Rows != millionRows || info.RowGroups < 2 {
		t.Errorf("file has %d rows in %d row groups", info.Rows, info.RowGroups)
	}
	t.Logf("file %.0f MB, %d row groups", float64(st.Size())/1e6, info.RowGroups)
}

func childWrite(t *testing.T, path string) {
	gen := newRolloutGen(4096)
	start := time.Now()
	size, err := writeRollouts(path, gen, millionRows)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stdout, "child: wrote %d rows, %.0f MB uncompressed, %.0f MB file in %v (%.0f rows/s)\n",
		millionRows, float64(logicalBytes(gen, millionRows))/1e6, float64(size)/1e6, el.Round(time.Millisecond), millionRows/el.Seconds())
}
