package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

const childEnv = "WHALE_PIPELINE_CRASH_CHILD"

// crashChild is what the parent tells the child process.
type crashChild struct {
	Root   string `json:"root"`
	Spec   []byte `json:"spec"` // the experiment file
	Stall  string `json:"stall"`
	Marker string `json:"marker"`
}

// stallStage runs its stage, then, with its files uploaded but before the
// commit, writes the marker and blocks until the parent kills the process.
type stallStage struct {
	stages.Stage
	marker string
}

func (s stallStage) Run(ctx context.Context, x *stages.Exec) error {
	if err := s.Stage.Run(ctx, x); err != nil {
		return err
	}
	os.WriteFile(s.marker, []byte(x.Stage), 0o644)
	select {}
}

// childMain runs the test binary as the crash child when asked: a `whale
// run` that stalls inside one stage. It reports whether it did.
func childMain() bool {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return false
	}
	var c crashChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		panic(err)
	}
	ctx := context.Background()
	exp, err := spec.Parse("child.yaml", c.Spec)
	if err != nil {
		panic(err)
	}
	s, err := storage.Open(ctx, c.Root, nil)
	if err != nil {
		panic(err)
	}
	dom, _ := registry.Lookup(exp.Domain, registry.Resources{})
	client, err := models.New(models.Config{Endpoints: exp.Model.Endpoints, Model: exp.Model.Name})
	if err != nil {
		panic(err)
	}
	LeaseTTL = 2 * time.Second
	wrapStage = func(st stages.Stage) stages.Stage {
		if st.Name() == c.Stall {
			return stallStage{Stage: st, marker: c.Marker}
		}
		return st
	}
	r := &Runner{Planner: Planner{Store: s, Run: exp.Name, Spec: exp}, Runtime: &Runtime{Domain: dom, Model: client}, Log: discard}
	err = r.RunToEnd(ctx, nil)
	fmt.Fprintln(os.Stderr, "child finished without stalling:", err)
	os.Exit(3)
	return true
}

// SIGKILL in the middle of a rollout, a filter and a finetune: `run` again
// finishes, and the committed artifacts match an uninterrupted run's —
// same stages, same rows, no duplicated episode.
func TestResumeAfterKill(t *testing.T) {
	body := "schedule: weights-only\nbudget: {weight_steps: 2}\nswitch: {fixed: {epochs: 1}}\n"
	ref := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
	refExp := ref.experiment(t, "resume", body)
	runToEnd(t, ref.runner(t, refExp))
	want := artifacts(t, ref.store, refExp.Name)

	for _, stall := range []string{StageRollout, StageFilter, StageFinetune} {
		t.Run(stall, func(t *testing.T) {
			w := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
			exp := w.experiment(t, "resume", body)
			src := experimentSource(t, w, "resume", body)
			marker := filepath.Join(t.TempDir(), "stalled")
			cfg, _ := json.Marshal(crashChild{Root: w.url, Spec: src, Stall: stall, Marker: marker})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				if _, err := os.Stat(marker); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("the child never reached the %s stage", stall)
				}
				time.Sleep(20 * time.Millisecond)
			}
			cmd.Process.Kill()
			cmd.Wait()

			r := w.runner(t, exp)
			// The dead child's lease expires after its 2 s TTL.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for {
				err := r.RunToEnd(ctx, nil)
				if err == nil {
					break
				}
				if !errors.Is(err, storage.ErrLeaseHeld) {
					t.Fatalf("resume: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if got := artifacts(t, w.store, exp.Name); !slices.Equal(got, want) {
				t.Errorf("after a kill in %s the run holds\n%v\nwant (uninterrupted)\n%v", stall, got, want)
			}
			entries, err := ledger.Read(context.Background(), w.store, exp.Name)
			if err != nil {
				t.Fatal(err)
			}
			var commits []string
			for _, e := range entries {
				if e.Kind == ledger.KindStage {
					commits = append(commits, e.Position+"-"+e.Stage)
				}
			}
			refEntries, _ := ledger.Read(context.Background(), ref.store, refExp.Name)
			var refCommits []string
			for _, e := range refEntries {
				if e.Kind == ledger.KindStage {
					refCommits = append(refCommits, e.Position+"-"+e.Stage)
				}
			}
			// The stage the child committed before its kill is in the
			// ledger too; the sequence of commits is the same.
			if !slices.Equal(commits, refCommits) {
				t.Errorf("ledger commits %v, want %v", commits, refCommits)
			}
		})
	}
}

// artifacts describes a run's committed stages: folder, tables with their
// row counts, and a check that no episode appears twice.
func artifacts(t *testing.T, s *storage.Store, run string) []string {
	t.Helper()
	ctx := context.Background()
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		rows := map[string]int64{}
		for _, f := range m.Files {
			rows[f.Table] += f.Rows
		}
		line := m.Position + "-" + m.Stage
		for _, k := range slices.Sorted(maps.Keys(rows)) {
			line += fmt.Sprintf(" %s=%d", k, rows[k])
		}
		out = append(out, line)
		seen := map[string]bool{}
		for _, f := range m.Table("rollouts") {
			ra, err := s.OpenReaderAt(ctx, m.FileKey(f))
			if err != nil {
				t.Fatal(err)
			}
			pos, err := schedule.ParsePosition(m.Position)
			if err != nil {
				t.Fatal(err)
			}
			err = schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
				// Rows say where they ran, for readers outside whale.
				if r.Schedule == "" || int(r.Round) != pos.Round || r.Section == "" || r.Stage != m.Stage {
					return fmt.Errorf("row of %s says schedule %q round %d section %q stage %q", m.Dir, r.Schedule, r.Round, r.Section, r.Stage)
				}
				k := fmt.Sprintf("%s/%d", r.TaskID, r.Sample)
				if seen[k] {
					return fmt.Errorf("episode %s appears twice in %s", k, m.Dir)
				}
				seen[k] = true
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}
