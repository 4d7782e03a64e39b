package analysis

import (
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/schemas"
)

// heapObjects is the bytes of heap objects, live or not yet swept.
func heapObjects() uint64 {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// peakHeap runs fn and returns the most heap it saw in use above what was
// live before, sampled every 100 µs.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	base := heapObjects()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			if h := heapObjects(); h > peak {
				peak = h
			}
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
	peak := max(<-done, heapObjects())
	if peak < base {
		return 0
	}
	return peak - base
}

// The messages and trace columns are never decoded: a file whose single
// row group holds 64 MB of messages is analysed in a few MB of heap.
func TestAnalyzeSkipsMessages(t *testing.T) {
	const rows, msg = 2000, 32 << 10
	big := strings.Repeat("the model thinks about the puzzle. ", 2*msg/35)
	var rs []schemas.Rollout
	for i := range rows {
		r := ep("r001-w01", h1, fmt.Sprintf("t%03d", i%100), float64(i%2), i%2 == 0, 3, 100, 10, "")
		// Substrings share big's bytes, so the test itself stays small.
		r.Messages = []schemas.Message{{Role: "assistant", Content: big[i%msg : i%msg+msg]}}
		r.Trace = []schemas.TraceEvent{{Turn: 1, Kind: "model", Action: big[i%msg : i%msg+msg/4]}}
		rs = append(rs, r)
	}
	path := writeFile(t, t.TempDir(), "big.parquet", nil,
		schemas.WriterOptions{RowGroupRows: rows, RowGroupBytes: 1 << 30}, rs)
	rs = nil
	var r Result
	peak := peakHeap(func() { r = analyse(t, Options{}, []string{path}) })
	if r.Rows != rows || len(r.Groups) != 1 || r.Groups[0].Tasks != 100 {
		t.Fatalf("result %+v", r)
	}
	t.Logf("peak heap above baseline: %.1f MB for %d MB of messages in one row group", float64(peak)/(1<<20), rows*msg*5/4>>20)
	if peak > 16<<20 {
		t.Errorf("peak heap %.1f MB: the messages column was decoded?", float64(peak)/(1<<20))
	}
}

const benchRows = 1_000_000

// BenchmarkAnalyze analyses a million rollouts (10 positions × 2 harnesses
// × 2000 tasks, 25 samples each) grouped by the default and by round and
// harness, and reports rows/s and the peak heap.
func BenchmarkAnalyze(b *testing.B) {
	start := time.Now()
	rows := make([]schemas.Rollout, 0, benchRows)
	for i := range benchRows {
		pos := fmt.Sprintf("r%03d-w%02d", 1+i%10/5, 1+i%5)
		h := []string{h1, h2}[i/10%2]
		task := fmt.Sprintf("task-%04d", i/20%2000)
		r := ep(pos, h, task, float64(i%3)/2, i%3 == 2, int32(1+i%7), int64(100+i%50), int64(i%40), "")
		if i%97 == 0 {
			r.Error = "model: timeout"
		}
		r.Messages = []schemas.Message{{Role: "user", Content: "solve " + task}, {Role: "assistant", Content: "answer"}}
		rows = append(rows, r)
	}
	path := writeFile(b, b.TempDir(), "million.parquet", map[string]string{"whale.stage": "rollout"}, schemas.WriterOptions{}, rows)
	rows = nil
	b.Logf("wrote %d rows in %v", benchRows, time.Since(start).Round(time.Millisecond))

	for _, by := range [][]string{DefaultBy, {DimRound, DimHarness}} {
		b.Run(strings.Join(by, ","), func(b *testing.B) {
			var peak uint64
			var n int64
			for b.Loop() {
				peak = max(peak, peakHeap(func() {
					a, err := New(Options{By: by})
					if err != nil {
						b.Fatal(err)
					}
					if err := addFile(b, a, path, Labels{}); err != nil {
						b.Fatal(err)
					}
					r := a.Result()
					if r.Rows != benchRows {
						b.Fatalf("read %d rows", r.Rows)
					}
					n += r.Rows
				}))
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		})
	}
}
