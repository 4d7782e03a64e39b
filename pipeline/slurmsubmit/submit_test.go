package slurmsubmit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/slurmtest"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { slurmtest.Main(m) }

// The shapes of a submission: a sharded rollout is an array and an
// afterok commit job, the last job resubmits, a chain adds `whale step`
// jobs each after the one before.
func TestSubmitShapes(t *testing.T) {
	tests := []struct {
		name   string
		shards int
		chain  int
		roles  []string
	}{
		{"sharded", 2, 1, []string{RoleShards, RoleCommit}},
		{"single", 1, 1, []string{RoleStage}},
		{"sharded chain", 3, 3, []string{RoleShards, RoleCommit, RoleStep, RoleStep}},
		{"single chain", 1, 2, []string{RoleStage, RoleStep}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			exp := w.experiment(t, "shape", tt.shards)
			fake := slurm.NewFake()
			s := &Submitter{Planner: w.planner(exp), Scheduler: fake,
				Options: Options{Root: w.url, Whale: "/opt/whale/bin/whale", Chain: tt.chain, LogDir: "/logs",
					Resources: Resources{Partition: "cpu", Time: 90 * time.Minute, CPUs: 2, GPUs: 1, Extra: []string{"--mail-type=END,FAIL"}}}}
			sub, err := s.Submit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sub.Plan.Stage != "rollout" || sub.Held != "" {
				t.Fatalf("plan %s, held %q", sub.Plan.Stage, sub.Held)
			}
			var roles []string
			for _, j := range sub.Jobs {
				roles = append(roles, j.Role)
			}
			if strings.Join(roles, " ") != strings.Join(tt.roles, " ") {
				t.Fatalf("roles %v, want %v", roles, tt.roles)
			}
			scripts := fake.Scripts()
			if len(scripts) != len(tt.roles) {
				t.Fatalf("%d scripts submitted, want %d", len(scripts), len(tt.roles))
			}
			for i, j := range sub.Jobs {
				sc := scripts[i]
				dirs := strings.Join(slurm.Directives(sc), " ")
				for _, want := range []string{"--requeue", "--partition=cpu", "--mail-type=END,FAIL"} {
					if !strings.Contains(dirs, want) {
						t.Errorf("job %d (%s) lacks %s: %s", i, j.Role, want, dirs)
					}
				}
				if i > 0 && !strings.Contains(dirs, "--dependency=afterok:"+sub.Jobs[i-1].ID) {
					t.Errorf("job %d (%s) is not afterok on job %s: %s", i, j.Role, sub.Jobs[i-1].ID, dirs)
				}
				if strings.Contains(sc, "AWS_") || !strings.Contains(sc, w.url) {
					t.Errorf("job %d: root or credentials wrong:\n%s", i, sc)
				}
				last := i == len(sub.Jobs)-1
				if got := strings.Contains(sc, "submit slurm"); got != last {
					t.Errorf("job %d (%s) resubmits: %v, want %v:\n%s", i, j.Role, got, last, sc)
				}
				switch j.Role {
				case RoleShards:
					want := "--shard \"${SLURM_ARRAY_TASK_ID}\"/" // the placeholder, quoted by the renderer
					if !strings.Contains(sc, "--array=0-") || !strings.Contains(sc, "stage --root") || !strings.Contains(sc, "--shard") {
						t.Errorf("array script (%s):\n%s", want, sc)
					}
				case RoleCommit:
					if !strings.Contains(sc, "--finalize") || strings.Contains(dirs, "--gres") || strings.Contains(dirs, "cpus-per-task") {
						t.Errorf("commit script:\n%s", sc)
					}
				case RoleStage, RoleStep:
					if !strings.Contains(sc, "/opt/whale/bin/whale step --root") {
						t.Errorf("%s script:\n%s", j.Role, sc)
					}
				}
				if last && tt.chain > 1 && !strings.Contains(sc, "--chain "+string(rune('0'+tt.chain))) {
					t.Errorf("the last job does not keep the chain:\n%s", sc)
				}
			}
			entries, err := ledger.Read(context.Background(), w.store, exp.Name)
			if err != nil {
				t.Fatal(err)
			}
			ids, _, err := LedgerJobs(context.Background(), w.store, exp.Name)
			if err != nil || len(ids) != len(tt.roles) || len(entries) != 1 || entries[0].Kind != ledger.KindJobs {
				t.Errorf("ledger %+v, jobs %v, %v", entries, ids, err)
			}

			// The jobs are queued: a second submission waits for them.
			again, err := s.Submit(context.Background())
			if err != nil || again.Held == "" || len(again.Jobs) != 0 {
				t.Fatalf("second submit: %+v, %v", again, err)
			}
			// Unless it is the last job of the chain itself asking.
			for _, j := range sub.Jobs {
				if err := fake.Start(j.ID); err != nil {
					t.Fatal(err)
				}
				if j.ID != sub.Jobs[len(sub.Jobs)-1].ID {
					if err := fake.Finish(j.ID, slurm.StateCompleted); err != nil {
						t.Fatal(err)
					}
				}
			}
			s.Self = sub.Jobs[len(sub.Jobs)-1].ID
			third, err := s.Submit(context.Background())
			if err != nil || third.Held != "" || len(third.Jobs) != len(tt.roles) {
				t.Fatalf("submit from the last job: %+v, %v", third, err)
			}
		})
	}
}

// A failed shard cancels the commit job (afterok): nothing follows, and a
// new submission is not held by the dead jobs.
func TestFailedJobSubmitsNothingAfter(t *testing.T) {
	w := newWorld(t)
	exp := w.experiment(t, "fail", 2)
	fake := slurm.NewFake()
	s := &Submitter{Planner: w.planner(exp), Scheduler: fake, Options: Options{Root: w.url, Whale: "/usr/bin/whale"}}
	sub, err := s.Submit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	arr, commit := sub.Jobs[0].ID, sub.Jobs[1].ID
	fake.Start(arr)
	if err := fake.Finish(arr+"_1", slurm.StateFailed); err != nil {
		t.Fatal(err)
	}
	fake.Finish(arr+"_0", slurm.StateCompleted)
	j, err := fake.State(context.Background(), commit)
	if err != nil || !j.Done() || j.State == slurm.StateCompleted {
		t.Fatalf("commit job after a failed shard: %+v, %v", j, err)
	}
	again, err := s.Submit(context.Background())
	if err != nil || again.Held != "" || len(again.Jobs) != 2 {
		t.Fatalf("resubmit after the failure: %+v, %v", again, err)
	}
}

// A live lease of another process holds submissions back; dry runs
// submit and record nothing; a root URL with a credential is refused.
func TestSubmitRefusals(t *testing.T) {
	w := newWorld(t)
	exp := w.experiment(t, "refuse", 2)
	ctx := context.Background()
	fake := slurm.NewFake()
	s := &Submitter{Planner: w.planner(exp), Scheduler: fake, Options: Options{Root: w.url, Whale: "/usr/bin/whale"}}

	s.DryRun = true
	sub, err := s.Submit(ctx)
	if err != nil || len(sub.Jobs) != 2 || len(fake.Scripts()) != 0 {
		t.Fatalf("dry run: %+v, %v, %d real submissions", sub, err, len(fake.Scripts()))
	}
	if ids, _, _ := LedgerJobs(ctx, w.store, exp.Name); len(ids) != 0 {
		t.Errorf("a dry run recorded jobs %v", ids)
	}
	s.DryRun = false

	lease, err := storage.AcquireLease(ctx, w.store, "runs/"+exp.Name+"/lease", storage.LeaseOptions{Holder: "cron tick", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sub, err = s.Submit(ctx)
	if err != nil || !strings.Contains(sub.Held, "cron tick") || len(fake.Scripts()) != 0 {
		t.Fatalf("with the lease held: %+v, %v", sub, err)
	}
	lease.Release(ctx)

	for _, tc := range []struct{ root, whale string }{
		{"s3://b?endpoint=http://127.0.0.1:1&secret_access_key=abc", "/usr/bin/whale"},
		{"file://u:pw@/x", "/usr/bin/whale"},
		{w.url, "whale"},
	} {
		s.Root, s.Whale = tc.root, tc.whale
		if _, err := s.Submit(ctx); err == nil || strings.Contains(err.Error(), "abc") || strings.Contains(err.Error(), "pw") {
			t.Errorf("root %s whale %s: %v", redact.URL(tc.root), tc.whale, err)
		}
	}
	if len(fake.Scripts()) != 0 {
		t.Errorf("refused submissions submitted %d jobs", len(fake.Scripts()))
	}
}

// A root URL with a secret in it is refused before any script is
// rendered, so that no job script carries it, and the error says to give
// credentials through the environment; a root with only the bucket's
// configuration goes into every script as it is.
func TestSubmitKeepsSecretsOutOfScripts(t *testing.T) {
	w := newWorld(t)
	exp := w.experiment(t, "secret", 2)
	ctx := context.Background()
	const secret = "LEAKs3cr3t"
	for _, root := range []string{
		"s3://b/p?region=x&secret_access_key=" + secret,
		"s3://b/p?region=x&token=" + secret + "%zz",
		"s3://b/p?region=x;token=" + secret,
		"s3://b/p?token=%25" + secret,
		"s3://AKIA:" + secret + "@b/p?region=x",
		"s3:AKIA:" + secret + "@b?region=x",
		"s3://b/p?endpoint=http://u:" + secret + "@minio:9000",
		"s3://b/p?endpoint=http://minio:9000/%3Ftoken%3D" + secret,
		"s3://b/p?endpoint=http%253A%252F%252Fminio%252F%253Ftoken%253D" + secret,
		"s3://b/p?region=x#" + secret,
		"s3://b/p%zz?region=" + secret,
		"azblob://c?sv=2020&sig=" + secret,
		"http://[::1]:9000/b?api_key=" + secret,
	} {
		for _, dry := range []bool{true, false} {
			fake := slurm.NewFake()
			s := &Submitter{Planner: w.planner(exp), Scheduler: fake, DryRun: dry,
				Options: Options{Root: root, Whale: "/usr/bin/whale", Chain: 2}}
			sub, err := s.Submit(ctx)
			if err == nil || !strings.Contains(err.Error(), "cannot go into a job script") || !strings.Contains(err.Error(), "through the environment") {
				t.Errorf("root %s (dry run %v): err = %v", redact.URL(root), dry, err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("root %s: the error shows the secret: %v", redact.URL(root), err)
			}
			scripts := fake.Scripts()
			if sub != nil {
				for _, j := range sub.Jobs {
					scripts = append(scripts, j.Script)
				}
			}
			for _, sc := range scripts {
				if strings.Contains(sc, secret) {
					t.Errorf("root %s: a job script holds the secret:\n%s", redact.URL(root), sc)
				}
			}
			if len(scripts) != 0 {
				t.Errorf("root %s (dry run %v): %d scripts rendered", redact.URL(root), dry, len(scripts))
			}
		}
	}

	root := "s3://bucket/whale?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true"
	fake := slurm.NewFake()
	s := &Submitter{Planner: w.planner(exp), Scheduler: fake, Options: Options{Root: root, Whale: "/usr/bin/whale", Chain: 2}}
	sub, err := s.Submit(ctx)
	if err != nil || len(sub.Jobs) != 3 {
		t.Fatalf("root with configuration only: %+v, %v", sub, err)
	}
	for _, sc := range fake.Scripts() {
		if !strings.Contains(sc, "--root "+slurm.Quote(root)) {
			t.Errorf("script lacks --root %s:\n%s", root, sc)
		}
	}
}

// The resources a job resubmits with are the ones it was submitted with.
func TestResourcesArgs(t *testing.T) {
	r := Resources{Partition: "p", Account: "a", QOS: "q", Time: 2*time.Hour + 30*time.Minute, GPUs: 4, GPUType: "a100",
		CPUs: 8, Mem: "64G", MaxParallel: 3, Extra: []string{"--exclusive", "--mail-type=END,FAIL"}, Prologue: []string{"module load x"}}
	got := strings.Join(r.Args(), " ")
	want := "--partition=p --account=a --qos=q --time=2h30m0s --gpus=4 --gpu-type=a100 --cpus=8 --mem=64G --max-parallel=3 --sbatch-extra=--exclusive --sbatch-extra=--mail-type=END,FAIL --prologue=module load x"
	if got != want {
		t.Errorf("args\n%s\nwant\n%s", got, want)
	}
	if len((Resources{}).Args()) != 0 {
		t.Error("zero resources give flags")
	}
}

// Each job's resources come from the experiment file — slurm.default with
// the stage's section over it — and flags override both; the commit job
// of an array drops GPUs, CPUs and memory.
func TestResourcesFromTheExperimentFile(t *testing.T) {
	w := newWorld(t)
	exp := w.experiment(t, "res", 2)
	exp.Slurm = spec.Slurm{
		Default: spec.SlurmResources{Partition: "cpu", Time: "2h", CPUs: 4, Mem: "16G", Prologue: []string{"source /venv/bin/activate"}},
		Stages: map[string]spec.SlurmResources{
			"rollout": {Partition: "gpu", GPUs: 1, MaxParallel: 3, Extra: []string{"--constraint=a100"}},
		},
	}
	for _, c := range []struct {
		name  string
		flags Resources
		want  []string
	}{
		{"from the file", Resources{}, []string{"--partition=gpu", "--gres=gpu:1", "--cpus-per-task=4", "--mem=16G", "--time=02:00:00", "--constraint=a100", "--array=0-1%3"}},
		{"flags win", Resources{Partition: "big", Time: 30 * time.Minute}, []string{"--partition=big", "--gres=gpu:1", "--time=00:30:00"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := slurm.NewFake()
			s := &Submitter{Planner: w.planner(exp), Scheduler: fake,
				Options: Options{Root: w.url, Whale: "/opt/whale/bin/whale", Resources: c.flags}}
			sub, err := s.Submit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(sub.Jobs) != 2 || sub.Jobs[0].Role != RoleShards {
				t.Fatalf("jobs %+v", sub.Jobs)
			}
			shards := strings.Join(slurm.Directives(sub.Jobs[0].Script), " ")
			for _, want := range c.want {
				if !strings.Contains(shards, want) {
					t.Errorf("array job lacks %s: %s", want, shards)
				}
			}
			if !strings.Contains(sub.Jobs[0].Script, "source /venv/bin/activate") {
				t.Errorf("array job lacks the prologue:\n%s", sub.Jobs[0].Script)
			}
			commit := strings.Join(slurm.Directives(sub.Jobs[1].Script), " ")
			if strings.Contains(commit, "--gres") || strings.Contains(commit, "--mem") {
				t.Errorf("commit job asks for GPUs or memory: %s", commit)
			}
		})
	}
}
