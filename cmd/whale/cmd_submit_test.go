package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/scheduler/slurm"
)

// A run with a sharded rollout, from the command line: `submit slurm`
// (dry run, then to a fake Slurm), `status` showing the jobs, and what
// the jobs would run — `stage --shard I/N` per shard and `stage
// --finalize` — by hand.
func TestSubmitSlurmCommands(t *testing.T) {
	r := fileRoot(t)
	var tasks strings.Builder
	for i := range 4 {
		fmt.Fprintf(&tasks, `{"id": "sum-%d", "question": "What is %d + 1?", "answer": "%d"}`+"\n", i, i, i+1)
	}
	data := writeFile(t, "sums.jsonl", tasks.String())
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: `\boxed{1}`}))
	exp := writeFile(t, "sharded.yaml", fmt.Sprintf(`name: sharded
domain: math
schedule: weights-only
data: {train: datasets/sums, test: datasets/sums-test}
model: {name: fake-model, endpoints: [%q]}
rsft: {group_size: 2, batch_size: 4}
rollout: {shards: 2}
finetune: {command: 'true', reload: none}
budget: {weight_steps: 1}
eval: {k: 1}
`, srv.URL))
	whale(t, "data", "import", "--root", r.url, "--domain", "math", data).mustCode(t, exitOK)
	importSumsTest(t, r.url)
	whale(t, "init", "--root", r.url, exp).mustCode(t, exitOK)

	fake := slurm.NewFake()
	old := newScheduler
	newScheduler = func() slurm.Scheduler { return fake }
	t.Cleanup(func() { newScheduler = old })

	dry := whale(t, "submit", "slurm", "--root", r.url, "--dry-run", "--whale", "/opt/whale", "--time", "1:30:00",
		"--sbatch-extra", "--mail-type=END,FAIL", "--partition", "cpu", "sharded")
	dry.mustCode(t, exitOK, "#SBATCH --array=0-1", "#SBATCH --time=01:30:00", "#SBATCH --mail-type=END,FAIL",
		"/opt/whale stage --root "+r.url+" --at r001-w01 --shard", "--finalize rollout sharded",
		"exec /opt/whale submit slurm --root "+r.url+" --whale /opt/whale --partition=cpu --time=1h30m0s --sbatch-extra=--mail-type=END,FAIL sharded")
	if len(fake.Scripts()) != 0 {
		t.Fatalf("a dry run submitted %d jobs", len(fake.Scripts()))
	}

	whale(t, "submit", "slurm", "--root", r.url, "--whale", "/opt/whale", "sharded").mustCode(t, exitOK,
		"submitted shards job 1000", "submitted commit job", "rollout at r001-w01 (2 shards)")
	whale(t, "submit", "slurm", "--root", r.url, "--whale", "/opt/whale", "sharded").mustCode(t, exitOK,
		"nothing submitted: run sharded has jobs in Slurm: 1000")
	if err := fake.Start("1000"); err != nil {
		t.Fatal(err)
	}
	whale(t, "status", "--root", r.url, "sharded").mustCode(t, exitOK, "slurm jobs", "2 recorded",
		"whale-sharded-r001-w01-rollout tasks 2 RUNNING", "whale-sharded-r001-w01-rollout-commit PENDING")

	// What the array's tasks and the commit job run.
	whale(t, "stage", "--root", r.url, "--at", "r001-w01", "--shard", "1/2", "rollout", "sharded").mustCode(t, exitOK, "shards missing: [0]")
	whale(t, "stage", "--root", r.url, "--at", "r001-w01", "--finalize", "rollout", "sharded").mustCode(t, exitFailure, "not committed their part: shard 0")
	whale(t, "stage", "--root", r.url, "--at", "r001-w01", "--shard", "0/2", "rollout", "sharded").mustCode(t, exitOK, "committed")
	whale(t, "stage", "--root", r.url, "--at", "r001-w01", "--finalize", "rollout", "sharded").mustCode(t, exitOK, "already committed")
	whale(t, "plan", "--root", r.url, "sharded").mustCode(t, exitOK, "next: filter at r001-w01")

	for _, bad := range [][]string{
		{"--shard", "2/2"}, {"--shard", "x"}, {"--shard", "0/2", "--force"}, {"--finalize", "--force"},
	} {
		args := append([]string{"stage", "--root", r.url, "--at", "r001-w01"}, bad...)
		whale(t, append(args, "rollout", "sharded")...).mustCode(t, exitUsage)
	}
	whale(t, "submit", "slurm", "--root", r.url, "--chain", "0", "sharded").mustCode(t, exitUsage, "--chain")
	whale(t, "submit", "slurm", "--root", r.url, "--time", "soon", "sharded").mustCode(t, exitUsage, "--time")
	whale(t, "submit", "slurm", "--root", "s3://b?endpoint=http://127.0.0.1:1&secret_access_key=hunter2", "sharded").mustCode(t, exitUsage, "credential")
}

// A --root with a secret anywhere a URL can hide one is refused before
// the root is opened or a script rendered, and the message neither shows
// the secret nor fails to say where credentials go.
func TestSubmitSlurmRefusesSecretRoot(t *testing.T) {
	fake := slurm.NewFake()
	old := newScheduler
	newScheduler = func() slurm.Scheduler { return fake }
	t.Cleanup(func() { newScheduler = old })
	const secret = "hunter2hunter2"
	for _, root := range []string{
		"s3://b?region=x&secret=" + secret + "%zz",
		"s3://b?region=x;secret=" + secret,
		"s3://b?endpoint=http://127.0.0.1:1/%3Ftoken%3D" + secret,
		"s3://k:" + secret + "@b?region=x",
		"s3://b?region=x#" + secret,
	} {
		res := whale(t, "submit", "slurm", "--dry-run", "--whale", "/opt/whale", "--root", root, "sharded")
		res.mustCode(t, exitUsage, "--root URL", "cannot go into a job script", "through the environment")
		if strings.Contains(res.stdout+res.stderr+fmt.Sprint(res.err), secret) {
			t.Errorf("--root %s: the secret is in the output:\n%s%s%v", root, res.stdout, res.stderr, res.err)
		}
	}
	if len(fake.Scripts()) != 0 {
		t.Errorf("%d jobs submitted", len(fake.Scripts()))
	}
}

func TestParseTimeLimit(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90m", 90 * time.Minute, true},
		{"2h30m", 150 * time.Minute, true},
		{"30", 30 * time.Minute, true},
		{"05:30", 5*time.Minute + 30*time.Second, true},
		{"1:00:00", time.Hour, true},
		{"2-00", 48 * time.Hour, true},
		{"1-02:03", 26*time.Hour + 3*time.Minute, true},
		{"1-02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second, true},
		{"0", 0, false},
		{"-5m", 0, false},
		{"soon", 0, false},
		{"1:2:3:4", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseTimeLimit(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseTimeLimit(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseTimeLimit(f *testing.F) {
	for _, s := range []string{"90m", "30", "1:00:00", "1-02:03:04", "x", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTimeLimit(s)
		if err == nil && d <= 0 {
			t.Errorf("%q parsed to a non-positive limit %v", s, d)
		}
	})
}

func TestParseShard(t *testing.T) {
	tests := []struct {
		in            string
		shard, shards int
		ok            bool
	}{
		{"0/1", 0, 1, true}, {"3/4", 3, 4, true}, {"4/4", 0, 0, false}, {"-1/4", 0, 0, false},
		{"1", 0, 0, false}, {"a/b", 0, 0, false}, {"0/0", 0, 0, false}, {"", 0, 0, false},
	}
	for _, tt := range tests {
		i, n, err := parseShard(tt.in)
		if (err == nil) != tt.ok || i != tt.shard || n != tt.shards {
			t.Errorf("parseShard(%q) = %d, %d, %v", tt.in, i, n, err)
		}
	}
}

func FuzzParseShard(f *testing.F) {
	for _, s := range []string{"0/1", "3/4", "x/y", "9/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, n, err := parseShard(s)
		if err == nil && (i < 0 || i >= n) {
			t.Errorf("%q parsed to shard %d of %d", s, i, n)
		}
	})
}
