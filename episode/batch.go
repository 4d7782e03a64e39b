package episode

import (
	"context"
	"fmt"
	"iter"
	"sync"

	"github.com/whalerun/whale/schemas"
)

// Job is one episode of a batch.
type Job struct {
	Index  int // position in the batch; results are emitted in this order
	Task   schemas.Task
	Sample int
	Seed   int64
}

// windowPerWorker sizes RunBatch's reorder window: at most this many
// episodes per worker may be started and not yet emitted. A slow episode
// at the head of the window then stalls new work instead of letting
// finished results pile up.
const windowPerWorker = 4

// RunBatch runs jobs with at most concurrency episodes in flight, calling
// play for each and emit with each result in job order (Index order), from
// one goroutine. At most a small multiple of concurrency results wait for
// emission, so memory stays flat however many jobs there are. It stops at
// the first error of emit or when ctx ends, returning that error.
func RunBatch(ctx context.Context, concurrency int, jobs iter.Seq[Job], play func(context.Context, Job) Result, emit func(Job, Result) error) error {
	if concurrency < 1 {
		concurrency = 1
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type slot struct {
		job  Job
		res  Result
		done chan struct{}
	}
	// order holds the started or about-to-start jobs in Index order; its
	// capacity plus the one slot the emitter holds is the window.
	order := make(chan *slot, windowPerWorker*concurrency-1)
	work := make(chan *slot)

	var workers sync.WaitGroup
	for range concurrency {
		workers.Go(func() {
			for s := range work {
				s.res = play(ctx, s.job)
				close(s.done)
			}
		})
	}

	var feedErr error
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		defer close(work)
		defer close(order)
		last, first := 0, true
		for j := range jobs {
			if !first && j.Index <= last {
				feedErr = fmt.Errorf("run batch: job index %d after %d: jobs must come in increasing Index order", j.Index, last)
				return
			}
			last, first = j.Index, false
			s := &slot{job: j, done: make(chan struct{})}
			select {
			case order <- s:
			case <-ctx.Done():
				return
			}
			select {
			case work <- s:
			case <-ctx.Done():
				return
			}
		}
	}()

	var emitErr error
	for s := range order {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if err := emit(s.job, s.res); err != nil {
			emitErr = fmt.Errorf("emit job %d: %w", s.job.Index, err)
			break
		}
		s.res = Result{}
	}
	cancel()
	<-fed
	workers.Wait()
	switch {
	case emitErr != nil:
		return emitErr
	case parent.Err() != nil:
		return parent.Err()
	}
	return feedErr
}

// Row is r as a rollouts-table row; base carries the columns the loop does
// not know (run, position, model and harness ids, task id, sample, seed).
// ModelID is r's when base leaves it empty.
func (r Result) Row(base schemas.Rollout) schemas.Rollout {
	row := base
	if row.ModelID == "" {
		row.ModelID = r.ModelID
	}
	row.Reward = r.Reward
	row.Correct = r.Correct
	row.Answer = r.Answer
	row.FinishReason = r.FinishReason
	row.Error = r.Error
	row.Turns = int32(r.Turns)
	row.PromptTokens = r.PromptTokens
	row.CompletionTokens = r.CompletionTokens
	row.LatencyMS = r.Latency.Milliseconds()
	row.Messages = r.Messages
	row.Trace = r.Trace
	row.Tools = r.Tools
	return row
}
