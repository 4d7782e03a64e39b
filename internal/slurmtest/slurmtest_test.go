package slurmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// The shared cluster runs a batch job to the end, through the
// environment Shared sets up.
func TestSharedRunsAJob(t *testing.T) {
	c := Shared(t)
	if c.Node == "" || c.Conf == "" {
		t.Fatalf("cluster without node or conf: %+v", c)
	}
	if got := os.Getenv("SLURM_CONF"); got != c.Conf {
		t.Fatalf("SLURM_CONF = %q, want %q", got, c.Conf)
	}
	out := filepath.Join(t.TempDir(), "out")
	sbatch, _ := lookPath("sbatch")
	id, err := exec.Command(sbatch, "--parsable", "--output=/dev/null", "--wrap", "echo hello-$SLURM_JOB_ID > "+out).Output()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, c.Logs())
	}
	want := "hello-" + strings.TrimSpace(string(id)) + "\n"
	err = waitFor(20*time.Second, func() error {
		data, err := os.ReadFile(out)
		switch {
		case err != nil:
			return err
		case string(data) != want && strings.HasPrefix(want, string(data)):
			// The shell has created the file and not written it yet.
			return fmt.Errorf("job wrote %q so far", data)
		case string(data) != want:
			t.Fatalf("job wrote %q, want %q", data, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("job %s did not write %s: %v\n%s", id, out, err, c.Logs())
	}
}

func TestConfNamesOnlyTheTempDir(t *testing.T) {
	c := Shared(t)
	data, err := os.ReadFile(c.Conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "/etc/") || strings.Contains(line, "/var/") {
			t.Errorf("slurm.conf reaches outside %s: %s", c.Dir, line)
		}
	}
}

// Under CI a missing Slurm fails the tests; elsewhere it skips them,
// unless the developer asked for an install.
func TestMissingSlurmSkipsOnlyOutsideCI(t *testing.T) {
	for _, tc := range []struct {
		ci, install string
		wantInstall bool
		wantSkip    bool
	}{
		{"", "", false, true},
		{"true", "", true, false},
		{"", "1", true, false},
		{"false", "0", false, true},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv("WHALE_SLURM_INSTALL", tc.install)
		err := mayInstall([]string{"slurmctld"})
		if (err == nil) != tc.wantInstall {
			t.Errorf("CI=%q WHALE_SLURM_INSTALL=%q: mayInstall = %v, want install %v", tc.ci, tc.install, err, tc.wantInstall)
		}
		if err != nil && (skips(err) != tc.wantSkip || !strings.Contains(err.Error(), "apt-get install")) {
			t.Errorf("CI=%q: skips(%v) = %v, want %v and a hint", tc.ci, err, skips(err), tc.wantSkip)
		}
		if tc.ci == "true" && skips(errSkip{"not root"}) {
			t.Error("under CI a missing prerequisite skipped instead of failing")
		}
	}
}
