package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// failOnce fails the first run of its stage with err, then runs it.
type failOnce struct {
	stages.Stage
	err   error
	calls *atomic.Int32
}

func (f failOnce) Run(ctx context.Context, x *stages.Exec) error {
	if f.calls.Add(1) == 1 {
		return f.err
	}
	return f.Stage.Run(ctx, x)
}

// RunToEnd runs a step again after a transient failure (the stage resumes
// and the run finishes) and halts at once on any other, returning it as
// it was.
func TestRunToEndRetriesTransientHaltsOtherwise(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		transient bool
	}{
		{"connection reset", fmt.Errorf("upload part: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"model endpoint down", &models.Error{Kind: models.KindConnection, Endpoint: "http://127.0.0.1:1/v1", Attempts: 5}, true},
		{"lease lost", fmt.Errorf("renew: %w", storage.ErrLeaseLost), true},
		{"a bug", errors.New("index out of range"), false},
		{"not found", fmt.Errorf("read: %w", storage.ErrNotFound), false},
		{"canceled", context.Canceled, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.transient {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.transient)
			}
			var calls atomic.Int32
			wrapStage = func(st stages.Stage) stages.Stage {
				if st.Name() == StageFilter {
					return failOnce{Stage: st, err: tc.err, calls: &calls}
				}
				return st
			}
			defer func() { wrapStage = func(s stages.Stage) stages.Stage { return s } }()
			w := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
			exp := w.experiment(t, "retry", "schedule: weights-only\nbudget: {weight_steps: 1}\nswitch: {fixed: {epochs: 1}}\n")
			r := w.runner(t, exp)
			r.Retry = retry.Policy{Attempts: 3, Base: time.Millisecond, Max: time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := r.RunToEnd(ctx, nil)
			switch {
			case tc.transient && err != nil:
				t.Fatalf("RunToEnd = %v, want the step run again and the run finished", err)
			case tc.transient && calls.Load() != 2:
				t.Errorf("filter ran %d times, want 2", calls.Load())
			case !tc.transient && (!errors.Is(err, tc.err) || !strings.HasPrefix(err.Error(), "filter at r001-w01: ") || strings.Contains(err.Error(), "attempts")):
				t.Errorf("RunToEnd = %v, want %v at once, as it was", err, tc.err)
			case !tc.transient && calls.Load() != 1:
				t.Errorf("filter ran %d times, want 1", calls.Load())
			}
		})
	}
}
