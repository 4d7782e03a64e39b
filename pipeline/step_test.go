package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
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
	reset := &storage.Error{Op: "write", URL: "s3://b", Key: "runs/x", Err: &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}}
	cases := []struct {
		name      string
		stage     string // default filter
		err       error
		transient bool // Transient(err)
		again     bool // the step runs again; default transient
	}{
		{name: "storage connection reset", err: fmt.Errorf("upload part: %w", reset), transient: true},
		// A trainer does not resume: a finetune is not run again, even
		// after a transient failure.
		{name: "finetune", stage: StageFinetune, err: fmt.Errorf("upload checkpoint: %w", reset), transient: true, again: false},
		// Only the origin counts, not the text: a reload endpoint or a
		// trainer's output saying "connection refused" is no storage
		// failure.
		{name: "reload endpoint down", err: fmt.Errorf("finetune: %w", &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/load_lora_adapter", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}), transient: false},
		{name: "text only", err: errors.New("trainer said: connection refused"), transient: false},
		{name: "truncated input", err: fmt.Errorf("read tasks: %w", io.ErrUnexpectedEOF), transient: false},
		{name: "model endpoint down", err: &models.Error{Kind: models.KindConnection, Endpoint: "http://127.0.0.1:1/v1", Attempts: 5}, transient: true},
		{name: "lease lost", err: fmt.Errorf("renew: %w", storage.ErrLeaseLost), transient: true},
		{name: "a bug", err: errors.New("index out of range"), transient: false},
		{name: "not found", err: fmt.Errorf("read: %w", storage.ErrNotFound), transient: false},
		{name: "canceled", err: context.Canceled, transient: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.transient {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.transient)
			}
			again := tc.transient && (tc.stage == "" || tc.again)
			stage := tc.stage
			if stage == "" {
				stage = StageFilter
			}
			var calls atomic.Int32
			wrapStage = func(st stages.Stage) stages.Stage {
				if st.Name() == stage {
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
			case again && err != nil:
				t.Fatalf("RunToEnd = %v, want the step run again and the run finished", err)
			case again && calls.Load() != 2:
				t.Errorf("%s ran %d times, want 2", stage, calls.Load())
			case !again && (!errors.Is(err, tc.err) || !strings.HasPrefix(err.Error(), stage+" at r001-w01: ") || strings.Contains(err.Error(), "attempts") || !errors.As(err, new(*StageError))):
				t.Errorf("RunToEnd = %v, want %v at once, as it was", err, tc.err)
			case !again && calls.Load() != 1:
				t.Errorf("%s ran %d times, want 1", stage, calls.Load())
			}
		})
	}
}
