package filter

import (
	"context"
	"fmt"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
)

const benchRows = 100_000

// benchSource writes benchRows rollouts as four files, as a four-shard
// rollout stage would, half of them accepted at the default threshold.
func benchSource() source {
	return source{write: func(ctx context.Context, x *stages.Exec) error {
		const files = 4
		for f := range files {
			pw, err := x.Create(ctx, "rollouts.parquet")
			if err != nil {
				return err
			}
			w, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{})
			if err != nil {
				return err
			}
			for i := range benchRows / files {
				task := fmt.Sprintf("task-%05d", (f*benchRows/files+i)/8)
				if err := w.Write(ro(task, int32(i%8), float64(i%2), "")); err != nil {
					return err
				}
			}
			if err := w.Close(); err != nil {
				return err
			}
			if _, err := pw.Finish(w.Rows()); err != nil {
				return err
			}
		}
		return nil
	}}
}

// BenchmarkFilter streams 100k rollout rows (six messages and three trace
// events each) through the whole stage: read, filter, write the sft table
// and commit.
func BenchmarkFilter(b *testing.B) {
	for _, url := range []string{"mem://", "file://"} {
		b.Run(url[:len(url)-3], func(b *testing.B) {
			root := url
			if url == "file://" {
				root += b.TempDir()
			}
			s := openStore(b, root)
			commitSource(b, s, benchSource())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := stages.Execute(context.Background(), s, stages.Spec{
					Run: run, Position: fmt.Sprintf("bench-%d", i), Seed: 1, Log: quiet,
					Inputs: []stages.InputRef{{Name: Input, Position: pos, Stage: "rollout"}},
				}, Stage{})
				if err != nil {
					b.Fatal(err)
				}
				if got := res.Manifest.Rows("sft"); got != benchRows/2 {
					b.Fatalf("%d examples, want %d", got, benchRows/2)
				}
			}
			b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
