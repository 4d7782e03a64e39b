package episode

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func seqJobs(n int) func(yield func(Job) bool) {
	return func(yield func(Job) bool) {
		for i := range n {
			if !yield(Job{Index: i, Seed: int64(i)}) {
				return
			}
		}
	}
}

// inFlight counts concurrent plays and remembers the most at once.
type inFlight struct {
	now, most atomic.Int64
}

func (f *inFlight) enter() {
	n := f.now.Add(1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (f *inFlight) leave() { f.now.Add(-1) }

func TestRunBatchOrderAndConcurrency(t *testing.T) {
	cases := []struct {
		name        string
		jobs        int
		concurrency int
		wantMost    int64 // the bound; the test also wants it reached when jobs allow
	}{
		{"one worker", 20, 1, 1},
		{"eight workers", 300, 8, 8},
		{"more workers than jobs", 3, 16, 3},
		{"zero means one", 5, 0, 1},
		{"no jobs", 0, 4, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f inFlight
			var emitted []int
			err := RunBatch(context.Background(), tc.concurrency, seqJobs(tc.jobs), func(ctx context.Context, j Job) Result {
				f.enter()
				defer f.leave()
				// The first wave waits for each other, so that the bound is
				// reached whenever the workers really run concurrently.
				if int64(j.Index) < tc.wantMost {
					for deadline := time.Now().Add(2 * time.Second); f.now.Load() < tc.wantMost && time.Now().Before(deadline); {
						time.Sleep(100 * time.Microsecond)
					}
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				return Result{Turns: j.Index}
			}, func(j Job, r Result) error {
				if r.Turns != j.Index {
					t.Errorf("job %d got the result of job %d", j.Index, r.Turns)
				}
				emitted = append(emitted, j.Index)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(emitted) != tc.jobs {
				t.Fatalf("%d emitted, want %d", len(emitted), tc.jobs)
			}
			for i, idx := range emitted {
				if idx != i {
					t.Fatalf("emitted %v: not in index order", emitted)
				}
			}
			if most := f.most.Load(); most != tc.wantMost {
				t.Errorf("at most %d in flight, want %d", most, tc.wantMost)
			}
		})
	}
}

// TestRunBatchSlowJobBlocksNewWork holds the first job while the others
// finish at once: the number started but not emitted must stay within the
// window, so a straggler cannot make the buffer grow without bound.
func TestRunBatchSlowJobBlocksNewWork(t *testing.T) {
	const conc = 4
	release := make(chan struct{})
	var started, emitted, most atomic.Int64
	var once sync.Once
	err := RunBatch(context.Background(), conc, seqJobs(500), func(ctx context.Context, j Job) Result {
		n := started.Add(1) - emitted.Load()
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if j.Index == 0 {
			// Let the other workers run ahead until they are blocked.
			time.Sleep(100 * time.Millisecond)
			once.Do(func() { close(release) })
		}
		return Result{}
	}, func(j Job, r Result) error {
		emitted.Add(1)
		return nil
	})
	<-release
	if err != nil {
		t.Fatal(err)
	}
	if emitted.Load() != 500 {
		t.Fatalf("%d emitted", emitted.Load())
	}
	if m := most.Load(); m > windowPerWorker*conc || m < conc {
		t.Errorf("at most %d started and not emitted, want within [%d, %d]", m, conc, windowPerWorker*conc)
	}
}

func TestRunBatchStops(t *testing.T) {
	errDisk := errors.New("disk full")
	cases := []struct {
		name string
		// stopAt is the index whose emit stops the batch.
		stopAt  int
		cancel  bool // cancel the context instead of failing emit
		wantErr error
	}{
		{"emit error", 5, false, errDisk},
		{"cancel during emit", 10, true, context.Canceled},
		{"emit error at the first job", 0, false, errDisk},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var played atomic.Int64
			var emitted []int
			err := RunBatch(ctx, 4, seqJobs(10_000), func(ctx context.Context, j Job) Result {
				played.Add(1)
				return Result{}
			}, func(j Job, r Result) error {
				emitted = append(emitted, j.Index)
				if j.Index == tc.stopAt {
					if tc.cancel {
						cancel()
						return nil
					}
					return errDisk
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if len(emitted) != tc.stopAt+1 {
				t.Errorf("emitted %d results after stopping at %d", len(emitted), tc.stopAt)
			}
			if p := played.Load(); p > int64(tc.stopAt+1+windowPerWorker*4+4) {
				t.Errorf("%d episodes played after stopping at %d", p, tc.stopAt)
			}
		})
	}
}

// TestRunBatchCancelInFlight cancels while every worker waits on ctx: the
// canceled episodes are not emitted and RunBatch returns only after every
// play has returned.
func TestRunBatchCancelInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var running atomic.Int64
	var emits atomic.Int64
	time.AfterFunc(50*time.Millisecond, cancel)
	err := RunBatch(ctx, 3, seqJobs(100), func(ctx context.Context, j Job) Result {
		running.Add(1)
		defer running.Add(-1)
		if j.Index < 2 {
			return Result{}
		}
		<-ctx.Done()
		return Result{FinishReason: FinishError, Error: "canceled: " + ctx.Err().Error()}
	}, func(j Job, r Result) error {
		emits.Add(1)
		if r.FinishReason == FinishError {
			t.Errorf("job %d: canceled episode emitted", j.Index)
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if running.Load() != 0 {
		t.Errorf("%d plays still running after RunBatch returned", running.Load())
	}
	if emits.Load() != 2 {
		t.Errorf("%d emitted, want 2", emits.Load())
	}
}

func TestRunBatchRejectsIndexOrder(t *testing.T) {
	jobs := func(yield func(Job) bool) {
		for _, i := range []int{0, 1, 5, 3, 6} {
			if !yield(Job{Index: i}) {
				return
			}
		}
	}
	var emitted []int
	err := RunBatch(context.Background(), 2, jobs, func(context.Context, Job) Result { return Result{} }, func(j Job, _ Result) error {
		emitted = append(emitted, j.Index)
		return nil
	})
	if err == nil || len(emitted) != 3 {
		t.Fatalf("err %v, emitted %v", err, emitted)
	}
}

func TestRunBatchCanceledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := RunBatch(ctx, 2, seqJobs(5), func(context.Context, Job) Result {
		t.Error("played after cancel")
		return Result{}
	}, func(Job, Result) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}
