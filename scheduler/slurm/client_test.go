package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
