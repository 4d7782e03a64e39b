package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A job the controller has forgotten is looked up in the accounting
// database where sacct works, and is unknown where it does not. The
// commands are FAKE shell scripts standing in for scontrol and sacct.
func TestStateFallsBackToSacctFake(t *testing.T) {
	tests := []struct {
		name, sacct string
		want        string
		unknown     bool
	}{
		{"accounting", "#!/bin/sh\necho '42|whale-x-r001-w01-rollout|cpu|COMPLETED|0:0'\n", "COMPLETED", false},
		{"cancelled by a user", "#!/bin/sh\necho '42|whale-x|cpu|CANCELLED by 0|0:15'\n", "CANCELLED", false},
		{"no accounting storage", "#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n", "", true},
		{"no sacct", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, body string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write("scontrol", "#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
			if tt.sacct != "" {
				write("sacct", tt.sacct)
			}
			c := &Client{Bin: dir, Retries: -1}
			j, err := c.State(context.Background(), "42")
			if tt.unknown {
				if !errors.Is(err, ErrUnknownJob) {
					t.Fatalf("State = %+v, %v; want ErrUnknownJob", j, err)
				}
				return
			}
			if err != nil || j.State != tt.want || j.ID != "42" {
				t.Fatalf("State = %+v, %v; want %s", j, err, tt.want)
			}
		})
	}
}

// A busy controller is retried for reads and not for sbatch; other
// failures are not retried. The commands are FAKE shell scripts that fail
// a given number of times, counting their runs in a file.
func TestBusyControllerRetriesFake(t *testing.T) {
	const busy = "squeue: error: Unable to contact slurm controller (connect failure)"
	tests := []struct {
		name     string
		command  string
		fails    int
		stderr   string
		retries  int
		wantRuns int
		wantErr  string // "" means success
	}{
		{"busy then answers", "squeue", 2, busy, 0, 3, ""},
		{"busy for ever", "squeue", 100, busy, 1, 2, "gave up after 2 attempts: squeue"},
		{"no retries", "squeue", 100, busy, -1, 1, "Unable to contact"},
		{"other errors fail at once", "squeue", 100, "squeue: error: Invalid user: nobody", 0, 1, "Invalid user"},
		{"sbatch is never retried", "sbatch", 100, busy, 3, 1, "Unable to contact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			count := filepath.Join(dir, "runs")
			script := fmt.Sprintf("#!/bin/sh\nn=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q\n"+
				"if [ $n -le %[2]d ]; then echo %[3]q >&2; exit 1; fi\n", count, tt.fails, tt.stderr)
			if err := os.WriteFile(filepath.Join(dir, tt.command), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			c := &Client{Bin: dir, Retries: tt.retries}
			var err error
			if tt.command == "sbatch" {
				_, err = c.Submit(context.Background(), "#!/bin/sh\ntrue\n")
			} else {
				_, err = c.Jobs(context.Background(), Filter{})
			}
			b, _ := os.ReadFile(count)
			if runs, _ := strconv.Atoi(strings.TrimSpace(string(b))); runs != tt.wantRuns {
				t.Errorf("%d runs, want %d", runs, tt.wantRuns)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *CommandError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *CommandError saying %q", err, tt.wantErr)
			}
		})
	}
}
