// Package duckbench holds the side-by-side benchmark of `whale analyze`
// against DuckDB on one generated rollouts file. It is a module of its own
// so that DuckDB (a cgo library, a 40 s build) is built only by `make
// bench`, never by `go build ./...` or `make test` of whale.
package duckbench

import (
	"fmt"
	"os"

	"github.com/whalerun/whale/schemas"
)

// Layout of the generated file: ten weight steps (two rounds of five),
// each a rollout batch of Tasks tasks with Samples samples each, as whale's
// rollout stage writes them: a batch's tasks run Concurrent at a time, so
// the samples of a task are interleaved with those of its neighbours.
const (
	Positions  = 10
	Tasks      = 12_684
	Samples    = 8
	Concurrent = 64
	Rows       = Positions * Tasks * Samples // 1,014,720
)

const (
	harnessA = "sha256:1d3f0c6a94b27e58c0e1f3a9b4d7c2e6f8a0b1c3d5e7f9a2b4c6d8e0f1a3b5c7"
	harnessB = "sha256:2e4a1d7b05c38f69d1f2a4b0c5e8d3f7a9b1c2d4e6f8a0b3c5d7e9f1a2b4c6d8"
)

// mix is a deterministic hash of a row's coordinates (splitmix64).
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Position returns the position of weight step i (0-based).
func Position(i int) string { return fmt.Sprintf("r%03d-w%02d", 1+i/5, 1+i%5) }

// Row returns row i of the file in write order.
func Row(i int) schemas.Rollout {
	p := i / (Tasks * Samples)
	j := i % (Tasks * Samples)
	chunk, k := j/(Concurrent*Samples), j%(Concurrent*Samples)
	width := min(Concurrent, Tasks-chunk*Concurrent)
	t, s := chunk*Concurrent+k%width, k/width
	// Batches overlap: the task pool is 40,000 tasks and each step takes
	// the next Tasks of them.
	task := fmt.Sprintf("task-%05d", (p*9_000+t)%40_000)
	h := mix(uint64(p)<<40 | uint64(t)<<8 | uint64(s))
	hard := mix(uint64(t)) % 4 // some tasks are never solved
	r := schemas.Rollout{
		Run: "bench", Position: Position(p), ModelID: fmt.Sprintf("model-step-%d", p),
		HarnessID: []string{harnessA, harnessB}[p/5], TaskID: task, Sample: int32(s), Seed: int64(h >> 1),
		Reward:           float64(h%1000) / 999 * float64(min(hard, 1)),
		Turns:            int32(1 + h>>10%8),
		PromptTokens:     int64(200 + h>>20%1800),
		CompletionTokens: int64(10 + h>>32%490),
		LatencyMS:        int64(h >> 40 % 5000),
		FinishReason:     "stop",
		Answer:           fmt.Sprintf("answer %d", h%97),
		Messages: []schemas.Message{
			{Role: "system", Content: "You solve puzzles. Think, then answer."},
			{Role: "user", Content: "Solve " + task + "."},
			{Role: "assistant", Content: fmt.Sprintf("Thinking about %s … the answer is %d.", task, h%97)},
		},
		Trace: []schemas.TraceEvent{{Turn: 1, Kind: "model", Action: "answer", Feedback: "ok"}},
	}
	r.Correct = r.Reward >= 0.7
	if h%101 == 0 {
		r.Error = "model: timeout after 60s"
		r.FinishReason = "error"
	}
	return r
}

// WriteFile writes the Rows rows as one zstd rollouts file with whale's
// writer and its default row groups.
func WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := schemas.NewWriter[schemas.Rollout](f, schemas.Rollouts, schemas.WriterOptions{
		Metadata: map[string]string{"whale.run": "bench", "whale.stage": "rollout"}})
	if err != nil {
		return err
	}
	buf := make([]schemas.Rollout, 0, 4096)
	for i := range Rows {
		buf = append(buf, Row(i))
		if len(buf) == cap(buf) || i == Rows-1 {
			if err := w.Write(buf...); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
