package slurm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/slurmtest"
)

func TestMain(m *testing.M) { slurmtest.Main(m) }

// Integration tests against the real cluster of internal/slurmtest.

func newClient(t *testing.T) (*Client, *slurmtest.Cluster) {
	t.Helper()
	c := slurmtest.Shared(t)
	return &Client{Env: c.Env()}, c
}

func uniqueName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "whale-test-" + hex.EncodeToString(b)
}

// submit renders tmpl with s (logs into dir) and submits it.
func submit(t *testing.T, c Scheduler, tmpl string, s Spec, dir string) string {
	t.Helper()
	if s.Output == "" {
		s.Output = filepath.Join(dir, "%x-%j.out")
	}
	script, err := DefaultRenderer().Render(tmpl, s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Submit(t.Context(), script)
	if err != nil {
		t.Fatalf("submit %s: %v", s.Name, err)
	}
	return id
}

// waitFor polls State until ok accepts the job or the time is up.
func waitFor(t *testing.T, c Scheduler, cl *slurmtest.Cluster, id string, limit time.Duration, what string, ok func(Job) bool) Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	var j Job
	var err error
	for {
		j, err = c.State(ctx, id)
		if err == nil && ok(j) {
			return j
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s not %s after %s: last %+v, err %v\n%s", id, what, limit, j, err, cl.Logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func done(j Job) bool { return j.Done() }

func TestSubmitRunsToCompleted(t *testing.T) {
	t.Parallel()
	c, cl := newClient(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "result")
	name := uniqueName(t)
	id := submit(t, c, TemplateStage, Spec{
		Name:    name,
		Command: []string{"sh", "-c", `printf '%s %s' "$SLURM_JOB_ID" "$WHALE_GREETING" > "$1"`, "sh", out},
		Env:     map[string]string{"WHALE_GREETING": "it's a test"},
		Time:    time.Minute, Requeue: true,
	}, dir)
	j := waitFor(t, c, cl, id, 30*time.Second, "done", done)
	if j.State != StateCompleted || j.ExitCode != "0:0" || j.Name != name {
		t.Fatalf("job %s: state %s exit %s name %q, want COMPLETED 0:0 %q", id, j.State, j.ExitCode, j.Name, name)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := id + " it's a test"; string(data) != want {
		t.Fatalf("job wrote %q, want %q", data, want)
	}
	if !strings.HasSuffix(j.StdOut, name+"-"+id+".out") {
		t.Errorf("stdout %q, want the rendered pattern %%x-%%j.out", j.StdOut)
	}
}

func TestArrayTasksGetTheirShard(t *testing.T) {
	t.Parallel()
	c, cl := newClient(t)
	dir := t.TempDir()
	id := submit(t, c, TemplateArray, Spec{
		Name:    uniqueName(t),
		Command: []string{"sh", "-c", `printf '%s/%s' "$WHALE_SHARD" "$WHALE_SHARDS" > "$1"`, "sh", filepath.Join(dir, "shard-{shard}")},
		Shards:  3,
		Output:  filepath.Join(dir, "%x-%A_%a.out"),
	}, dir)
	j := waitFor(t, c, cl, id, 30*time.Second, "done", done)
	if j.State != StateCompleted || len(j.Tasks) != 3 {
		t.Fatalf("array %s: state %s with %d tasks, want COMPLETED with 3: %+v", id, j.State, len(j.Tasks), j)
	}
	for i, want := range []string{"0/3", "1/3", "2/3"} {
		data, err := os.ReadFile(filepath.Join(dir, "shard-"+want[:1]))
		if err != nil || string(data) != want {
			t.Errorf("task %d wrote %q (%v), want %q", i, data, err, want)
		}
	}
	var ids []string
	for _, task := range j.Tasks {
		ids = append(ids, task.ID)
	}
	slices.Sort(ids)
	if want := []string{id + "_0", id + "_1", id + "_2"}; !slices.Equal(ids, want) {
		t.Errorf("task ids %v, want %v", ids, want)
	}
}

func TestAfterOKRunsSecondAfterFirst(t *testing.T) {
	t.Parallel()
	c, cl := newClient(t)
	dir := t.TempDir()
	first := filepath.Join(dir, "first")
	a := submit(t, c, TemplateStage, Spec{Name: uniqueName(t),
		Command: []string{"sh", "-c", `sleep 1; touch "$1"`, "sh", first}}, dir)
	// Fails (and so shows) if it starts before the first has finished.
	b := submit(t, c, TemplateCommit, Spec{Name: uniqueName(t), AfterOK: []string{a},
		Command: []string{"sh", "-c", `test -f "$1" && touch "$2"`, "sh", first, filepath.Join(dir, "second")}}, dir)
	pending, err := c.State(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if pending.State != StatePending || !strings.HasPrefix(pending.Dependency, "afterok:"+a) {
		t.Errorf("dependent right after submit: %s %s dependency %q, want PENDING on afterok:%s", pending.State, pending.Reason, pending.Dependency, a)
	}
	jb := waitFor(t, c, cl, b, 30*time.Second, "done", done)
	ja, err := c.State(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if ja.State != StateCompleted || jb.State != StateCompleted {
		t.Fatalf("first %s, second %s (%s): want both COMPLETED", ja.State, jb.State, jb.Reason)
	}
}

// What Slurm 22.05 does with the dependent of a failed job: cancel it
// (--kill-on-invalid-dep=yes, our default), or leave it pending forever
// with Reason DependencyNeverSatisfied.
func TestFailedDependencyNeverRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		keep       bool
		state      string
		wantReason string
	}{
		{"cancelled by default", false, StateCancelled, ""},
		{"kept pending", true, StatePending, ReasonDependencyNeverSatisfied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, cl := newClient(t)
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			a := submit(t, c, TemplateStage, Spec{Name: uniqueName(t), Command: []string{"sh", "-c", "exit 1"}}, dir)
			b := submit(t, c, TemplateCommit, Spec{Name: uniqueName(t), AfterOK: []string{a}, KeepOnInvalidDep: tc.keep,
				Command: []string{"touch", marker}}, dir)
			ja := waitFor(t, c, cl, a, 30*time.Second, "done", done)
			if ja.State != StateFailed || ja.ExitCode != "1:0" || ja.Succeeded() {
				t.Fatalf("first: %s exit %s, want FAILED 1:0", ja.State, ja.ExitCode)
			}
			jb := waitFor(t, c, cl, b, 30*time.Second, tc.state, func(j Job) bool {
				return j.State == tc.state && (tc.wantReason == "" || j.Reason == tc.wantReason)
			})
			t.Logf("Slurm reports the dependent as %s, reason %s, dependency %q", jb.State, jb.Reason, jb.Dependency)
			if tc.keep {
				if !jb.NeverRuns() {
					t.Errorf("NeverRuns() false for %+v", jb)
				}
				if err := c.Cancel(t.Context(), b); err != nil {
					t.Fatal(err)
				}
				waitFor(t, c, cl, b, 10*time.Second, "cancelled", func(j Job) bool { return j.State == StateCancelled })
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the dependent ran: %s exists (%v)", marker, err)
			}
		})
	}
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	c, cl := newClient(t)
	dir := t.TempDir()
	id := submit(t, c, TemplateStage, Spec{Name: uniqueName(t), Command: []string{"sleep", "300"}}, dir)
	waitFor(t, c, cl, id, 30*time.Second, "running", func(j Job) bool { return j.State == StateRunning })
	t0 := time.Now()
	if err := c.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, cl, id, 20*time.Second, "cancelled", func(j Job) bool { return j.State == StateCancelled })
	t.Logf("cancelled a running job in %s", time.Since(t0).Round(time.Millisecond))
	// Cancelling again, or a job Slurm never had, is not an error.
	if err := c.Cancel(t.Context(), id, "987654"); err != nil {
		t.Errorf("second cancel: %v", err)
	}
}

func TestJobsFiltersByNameAndID(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	dir := t.TempDir()
	prefix := uniqueName(t)
	// Held jobs stay pending, so the listing does not race their end.
	held := Spec{Command: []string{"true"}, Extra: []string{"--hold"}}
	var ids []string
	for _, suffix := range []string{"-r001-rollout", "-r001-commit"} {
		s := held
		s.Name = prefix + suffix
		ids = append(ids, submit(t, c, TemplateStage, s, dir))
	}
	other := held
	other.Name = uniqueName(t)
	otherID := submit(t, c, TemplateStage, other, dir)
	t.Cleanup(func() { _ = c.Cancel(context.Background(), append(ids, otherID)...) })

	for _, tc := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"prefix", Filter{NamePrefix: prefix}, ids},
		{"ids", Filter{IDs: []string{ids[1], otherID}}, []string{ids[1], otherID}},
		{"prefix and ids", Filter{NamePrefix: prefix, IDs: []string{ids[1], otherID}}, []string{ids[1]}},
		{"unknown id", Filter{IDs: []string{"987654"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := c.Jobs(t.Context(), tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range jobs {
				got = append(got, j.ID)
				if j.State != StatePending || j.Reason != "JobHeldUser" {
					t.Errorf("job %s: %s %s, want PENDING JobHeldUser", j.ID, j.State, j.Reason)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("Jobs(%+v) = %v, want %v", tc.f, got, want)
			}
		})
	}
}

func TestErrorsNameTheCommand(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	script, err := DefaultRenderer().Render(TemplateStage, Spec{Name: uniqueName(t), Partition: "no-such-partition", Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(t.Context(), script)
	var ce *CommandError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "sbatch --parsable") || !strings.Contains(err.Error(), "nvalid partition") {
		t.Errorf("submit to a missing partition: %v, want a CommandError naming sbatch and the partition", err)
	}
	_, err = c.State(t.Context(), "987654")
	if !errors.Is(err, ErrUnknownJob) {
		t.Errorf("State of an unknown job: %v, want ErrUnknownJob", err)
	}
}

// The pattern of a sharded rollout: three shards, then a commit job that
// sees every part.
func TestSubmitShardedCommitsAfterAllShards(t *testing.T) {
	t.Parallel()
	c, cl := newClient(t)
	dir := t.TempDir()
	name := uniqueName(t)
	aid, cid, err := SubmitSharded(t.Context(), c, DefaultRenderer(),
		Spec{Name: name + "-rollout", Output: filepath.Join(dir, "%x-%A_%a.out"), Shards: 3,
			Command: []string{"sh", "-c", `sleep 0.$1; touch "$2"`, "sh", "{shard}", filepath.Join(dir, "part-{shard}")}},
		Spec{Name: name + "-commit", Output: filepath.Join(dir, "%x-%j.out"),
			Command: []string{"sh", "-c", `ls "$1"/part-* | wc -l > "$1/committed"`, "sh", dir}})
	if err != nil {
		t.Fatal(err)
	}
	j := waitFor(t, c, cl, cid, 30*time.Second, "done", done)
	if j.State != StateCompleted {
		t.Fatalf("commit job %s: %s (%s)", cid, j.State, j.Reason)
	}
	data, err := os.ReadFile(filepath.Join(dir, "committed"))
	if err != nil || strings.TrimSpace(string(data)) != "3" {
		t.Errorf("commit job saw %q parts (%v), want 3", data, err)
	}
	if a, err := c.State(t.Context(), aid); err != nil || a.State != StateCompleted {
		t.Errorf("array %s: %+v %v", aid, a, err)
	}
}
