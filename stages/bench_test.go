package stages

import (
	"context"
	"fmt"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

func forEachBenchStore(b *testing.B, fn func(b *testing.B, s *storage.Store)) {
	b.Run("mem", func(b *testing.B) { fn(b, openStore(b, "mem://")) })
	b.Run("file", func(b *testing.B) { fn(b, openStore(b, "file://"+b.TempDir())) })
	b.Run("s3", func(b *testing.B) { fn(b, openStore(b, s3test.NewBucketURL(b))) })
}

func reportRequests(b *testing.B, before, after storage.Stats) {
	d := delta(after, before)
	n := float64(b.N)
	b.ReportMetric(float64(d.Reads)/n, "reads/op")
	b.ReportMetric(float64(d.Writes)/n, "writes/op")
	b.ReportMetric(float64(d.Lists)/n, "lists/op")
	b.ReportMetric(float64(d.Stats)/n, "stats/op")
}

// BenchmarkCommitOverhead executes a fresh one-shard stage that writes one
// tiny part per iteration: the protocol's cost over the work itself.
func BenchmarkCommitOverhead(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, s *storage.Store) {
		ctx := context.Background()
		st := &lines{rows: 1}
		before := s.Stats()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := Execute(ctx, s, spec(fmt.Sprintf("bench-%d", i), 1, 0), st); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportRequests(b, before, s.Stats())
	})
}

// BenchmarkIdempotentRerun re-executes a committed stage with one input:
// what `whale step` pays to find that there is nothing to do.
func BenchmarkIdempotentRerun(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, s *storage.Store) {
		ctx := context.Background()
		if _, err := Execute(ctx, s, spec("tasks", 1, 0), &lines{rows: 10}); err != nil {
			b.Fatal(err)
		}
		down := spec("r001-w01", 1, 0)
		down.Inputs = []InputRef{{Name: "src", Position: "tasks", Stage: "lines"}}
		st := &lines{rows: 1}
		if _, err := Execute(ctx, s, down, st); err != nil {
			b.Fatal(err)
		}
		before := s.Stats()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := Execute(ctx, s, down, st)
			if err != nil || !res.Skipped {
				b.Fatalf("%+v %v", res, err)
			}
		}
		b.StopTimer()
		reportRequests(b, before, s.Stats())
	})
}
