package slurmsubmit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/slurmtest"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// Integration tests: the whale binary, built from this module, driving
// runs through the real one-node Slurm of internal/slurmtest.

// buildWhale builds cmd/whale into dir once per test binary.
var whaleBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

func buildWhale(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WHALE_TEST_BINARY"); bin != "" {
		return bin // a developer's shortcut: a whale built from this tree
	}
	whaleBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "whale-slurmsubmit-bin-")
		if err != nil {
			whaleBin.err = err
			return
		}
		whaleBin.path = filepath.Join(dir, "whale")
		cmd := exec.Command("go", "build", "-o", whaleBin.path, "github.com/whalerun/whale/cmd/whale")
		whaleBin.out, whaleBin.err = cmd.CombinedOutput()
	})
	if whaleBin.err != nil {
		t.Fatalf("build whale: %v\n%s", whaleBin.err, whaleBin.out)
	}
	t.Cleanup(func() {}) // the binary's folder is removed by removeBin in the test itself
	return whaleBin.path
}

// whaleCmd runs the whale binary with the test's environment (which
// points at the test cluster) in dir.
func whaleCmd(ctx context.Context, bin, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	return cmd
}

// driven is one run that a test drives through Slurm.
type driven struct {
	w      *world
	exp    *spec.Experiment
	bin    string
	logDir string
	cl     *slurmtest.Cluster
	client *slurm.Client
}

func drive(t *testing.T, cl *slurmtest.Cluster, bin, name string, shards int) *driven {
	w := newWorld(t)
	d := &driven{w: w, exp: w.experiment(t, name, shards), bin: bin, logDir: t.TempDir(), cl: cl, client: &slurm.Client{Env: cl.Env()}}
	return d
}

func (d *driven) submit(t *testing.T, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := append([]string{"submit", "slurm", "--root", d.w.url, "--whale", d.bin,
		"--log-dir", d.logDir, "--time", "5m", "--cpus", "1"}, extra...)
	out, err := whaleCmd(ctx, d.bin, d.logDir, append(args, d.exp.Name)...).CombinedOutput()
	if err != nil {
		t.Fatalf("whale submit slurm: %v\n%s", err, out)
	}
	return string(out)
}

// logs are the jobs' logs, for failure messages.
func (d *driven) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(d.logDir, "*.out"))
	slices.Sort(files)
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "==== %s\n%s\n", filepath.Base(f), data)
	}
	return b.String()
}

// waitDone polls the planner until the run is done and no job of it is
// left in Slurm.
func (d *driven) waitDone(t *testing.T, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	pl := d.w.planner(d.exp)
	for {
		p, err := pl.Plan(ctx)
		if err == nil && p.Done() {
			live, err := LiveJobs(ctx, d.w.store, d.exp.Name, d.client)
			if err == nil && len(live) == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			jobs, _ := d.client.Jobs(context.Background(), slurm.Filter{NamePrefix: JobPrefix(d.exp.Name), User: "*"})
			t.Fatalf("run %s not done after %s (plan err %v); jobs %+v\n%s\n%s", d.exp.Name, limit, err, jobs, d.logs(), d.cl.Logs())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// episode is what identifies a rollout row and what it found.
type episode struct {
	Position, Task string
	Sample         int32
	Seed           int64
	Reward         float64
	Answer, Error  string
}

// episodes are the rows of every committed rollouts table of the run,
// sorted, and the stage folders they came from.
func (d *driven) episodes(t *testing.T) ([]episode, []*storage.Manifest) {
	t.Helper()
	ctx := context.Background()
	ms, err := storage.ListCommitted(ctx, d.w.store, d.exp.Name)
	if err != nil {
		t.Fatal(err)
	}
	var eps []episode
	for _, m := range ms {
		for _, f := range m.Table("rollouts") {
			ra, err := d.w.store.OpenReaderAt(ctx, m.FileKey(f))
			if err != nil {
				t.Fatal(err)
			}
			err = schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
				eps = append(eps, episode{m.Position + "-" + m.Stage, r.TaskID, r.Sample, r.Seed, r.Reward, r.Answer, r.Error})
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
		}
	}
	slices.SortFunc(eps, func(a, b episode) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return eps, ms
}

func folderNames(ms []*storage.Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Position+"-"+m.Stage)
	}
	slices.Sort(out)
	return out
}

// The Slurm scenarios run one after another: the test node has two CPUs.
func TestSlurm(t *testing.T) {
	cl := slurmtest.Shared(t)
	bin := buildWhale(t)
	if os.Getenv("WHALE_TEST_BINARY") == "" {
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(bin)) })
	}

	// 1. One `whale submit slurm` runs the experiment to its end, the
	// rollout as an array of 2 shards and a commit job.
	ref := drive(t, cl, bin, "slurm-run", 2)
	var refEpisodes []episode
	var refFolders []string
	t.Run("runs to the end", func(t *testing.T) {
		start := time.Now()
		out := ref.submit(t)
		if !strings.Contains(out, "submitted shards job") || !strings.Contains(out, "submitted commit job") {
			t.Fatalf("first submission:\n%s", out)
		}
		ref.waitDone(t, 3*time.Minute)
		t.Logf("run of %s through Slurm: %s", ref.exp.Name, time.Since(start).Round(time.Millisecond))
		st, _ := whaleCmd(t.Context(), bin, ref.logDir, "status", "--root", ref.w.url, ref.exp.Name).CombinedOutput()
		t.Logf("whale status:\n%s", st)
		var ms []*storage.Manifest
		refEpisodes, ms = ref.episodes(t)
		refFolders = folderNames(ms)
		for _, want := range []string{"r001-w01-rollout", "r001-w01-filter", "r001-w01-finetune"} {
			if !slices.Contains(refFolders, want) {
				t.Errorf("committed %v, lacks %s", refFolders, want)
			}
		}
		for _, m := range ms {
			if m.Stage != "rollout" {
				continue
			}
			shards := map[int]bool{}
			for _, f := range m.Table("rollouts") {
				shards[f.Shard] = true
			}
			if len(shards) != 2 {
				t.Errorf("%s: rollouts from shards %v, want 0 and 1", m.Dir, shards)
			}
		}
		train, failed := 0, 0
		for _, e := range refEpisodes {
			if e.Position == "r001-w01-rollout" {
				train++
			}
			if e.Error != "" {
				failed++
				t.Logf("failed episode: %+v", e)
			}
		}
		if failed > 0 {
			t.Errorf("%d episodes failed: the jobs did not reach the model server", failed)
		}
		if train != 4*2 {
			t.Errorf("%d training episodes, want batch 4 × group 2 = 8 (committed %v)", train, refFolders)
		}
		ids, _, err := LedgerJobs(context.Background(), ref.w.store, ref.exp.Name)
		if err != nil || len(ids) < 4 {
			t.Errorf("ledger records jobs %v (%v); want the array, its commit job and one job per further stage", ids, err)
		}
		st, err = whaleCmd(t.Context(), bin, ref.logDir, "status", "--root", ref.w.url, ref.exp.Name).CombinedOutput()
		if err != nil || !strings.Contains(string(st), "slurm jobs") || !strings.Contains(string(st), "r001-w01 rollout") {
			t.Errorf("whale status: %v\n%s", err, st)
		}
	})
	if t.Failed() {
		return
	}

	// 2. scancel of the shards in the middle of the rollout stops the run
	// (its commit job is cancelled with it); `whale submit slurm` again
	// finishes it with the same episodes, none lost, none twice.
	t.Run("scancel and resubmit", func(t *testing.T) {
		d := drive(t, cl, bin, "slurm-run", 2)
		d.w.SetDelay(3 * time.Second)
		d.submit(t)
		ctx := t.Context()
		ids, _, err := LedgerJobs(ctx, d.w.store, d.exp.Name)
		if err != nil || len(ids) != 2 {
			t.Fatalf("jobs %v, %v", ids, err)
		}
		deadline := time.Now().Add(time.Minute)
		for d.w.Calls() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no shard called the model within a minute\n%s", d.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := d.client.Cancel(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		for {
			live, err := LiveJobs(ctx, d.w.store, d.exp.Name, d.client)
			if err != nil {
				t.Fatal(err)
			}
			if len(live) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs still live after scancel: %+v", live)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if m, err := storage.LatestCommitted(ctx, d.w.store, d.exp.Name, "r001-w01", "rollout"); err == nil {
			t.Fatalf("the rollout committed (%s) although its shards were cancelled mid-stage", m.Dir)
		}
		d.w.SetDelay(0)
		out := d.submit(t)
		if !strings.Contains(out, "rollout at r001-w01") {
			t.Errorf("resubmission:\n%s", out)
		}
		d.waitDone(t, 3*time.Minute)
		got, ms := d.episodes(t)
		if !slices.Equal(folderNames(ms), refFolders) {
			t.Errorf("committed %v, want %v", folderNames(ms), refFolders)
		}
		if !slices.Equal(got, refEpisodes) {
			t.Errorf("episodes after scancel and resubmit differ from an uninterrupted run's:\n got %v\nwant %v", got, refEpisodes)
		}
		entries, _ := ledger.Read(ctx, d.w.store, d.exp.Name)
		jobsEntries := 0
		for _, e := range entries {
			if e.Kind == ledger.KindJobs {
				jobsEntries++
			}
		}
		if jobsEntries < 4 {
			t.Errorf("%d job submissions in the ledger, want the cancelled one, the resubmission and the later stages'", jobsEntries)
		}
	})

	// 3. --chain 3: the rollout's array and commit job, then two `whale
	// step` jobs, each afterok on the one before; the last submits the
	// next chain.
	t.Run("chain", func(t *testing.T) {
		d := drive(t, cl, bin, "chain-run", 2)
		out := d.submit(t, "--chain", "3")
		for _, want := range []string{"submitted shards job", "submitted commit job", "submitted step job"} {
			if !strings.Contains(out, want) {
				t.Fatalf("chain submission lacks %q:\n%s", want, out)
			}
		}
		d.waitDone(t, 3*time.Minute)
		_, ms := d.episodes(t)
		if !slices.Equal(folderNames(ms), refFolders) {
			t.Errorf("committed %v, want %v\n%s", folderNames(ms), refFolders, d.logs())
		}
		entries, err := ledger.Read(t.Context(), d.w.store, d.exp.Name)
		if err != nil {
			t.Fatal(err)
		}
		var subs []string
		for _, e := range entries {
			if e.Kind == ledger.KindJobs {
				subs = append(subs, e.Reason)
			}
		}
		if len(subs) != 2 || strings.Count(subs[0], "step ") != 2 {
			t.Errorf("submissions %q: want two chains, the first of shards, commit and two steps", subs)
		}
	})

	// 4. Two cron ticks at once: one runs the stage, the other exits 0
	// with one line naming the holder.
	t.Run("cron ticks", func(t *testing.T) {
		d := drive(t, cl, bin, "cron-run", 2)
		d.w.SetDelay(300 * time.Millisecond)
		var wg sync.WaitGroup
		outs := make([]bytes.Buffer, 2)
		logs := make([]bytes.Buffer, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := whaleCmd(t.Context(), bin, d.logDir, "step", "--root", d.w.url, d.exp.Name)
				cmd.Stdout = &outs[i]
				cmd.Stderr = &logs[i]
				errs[i] = cmd.Run()
			}()
		}
		wg.Wait()
		ran, busy := 0, 0
		for i := range 2 {
			out := outs[i].String()
			if errs[i] != nil {
				t.Errorf("tick %d: %v\n%s\n%s", i, errs[i], out, logs[i].String())
			}
			switch {
			case strings.Contains(out, "rollout at r001-w01: committed"):
				ran++
			case strings.Contains(out, "is busy") && strings.Count(strings.TrimSpace(out), "\n") == 0:
				busy++
			default:
				t.Errorf("tick %d said:\n%s\n%s", i, out, logs[i].String())
			}
		}
		if ran != 1 || busy != 1 {
			t.Errorf("%d ticks ran the stage, %d were busy; want one each", ran, busy)
		}
	})
}
