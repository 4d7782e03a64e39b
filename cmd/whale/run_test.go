package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
)

// A run driven from the command line: init, data import, plan, step,
// stage, run — against a scripted OpenAI-compatible server (a fake) with
// the real math domain and a trainer command.
func TestPlanStepRunCommands(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		var tasks strings.Builder
		answers := map[string]string{}
		for i := range 6 {
			q := fmt.Sprintf("What is %d + %d?", 11*i, 7+i)
			answers[q] = fmt.Sprint(11*i + 7 + i)
			fmt.Fprintf(&tasks, `{"id": "sum-%d", "question": %q, "answer": %q}`+"\n", i, q, answers[q])
		}
		data := writeFile(t, "sums.jsonl", tasks.String())
		var slow sync.Map
		srv := modeltest.NewServer(t, func(req *modeltest.Request) modeltest.Reply {
			var delay time.Duration
			if _, ok := slow.Load("on"); ok {
				delay = 300 * time.Millisecond
			}
			for _, m := range req.Messages {
				// The question is the first line of the user message (the
				// paper's math h0 adds an answer-format line).
				q, _, _ := strings.Cut(m.Content, "\n")
				if a, ok := answers[q]; ok && m.Role == "user" {
					if len(q)%2 == 0 {
						return modeltest.Reply{Content: `\boxed{` + a + `}`, Delay: delay}
					}
				}
			}
			return modeltest.Reply{Content: `\boxed{0}`, Delay: delay}
		})
		exp := writeFile(t, "sums.yaml", fmt.Sprintf(`name: sums
domain: math
schedule: weights-only
data: {train: datasets/sums, test: datasets/sums-test}
model: {name: fake-model, endpoints: [%q], concurrency: 2}
rsft: {group_size: 2, batch_size: 3}
switch: {fixed: {epochs: 1}}
finetune: {command: 'wc -l < "$WHALE_SFT_JSONL" > "$WHALE_OUTPUT_DIR/model.bin"', reload: none}
budget: {weight_steps: 2}
eval: {k: 2}
`, srv.URL))
		whale(t, "data", "import", "--root", r.url, "--domain", "math", data).mustCode(t, exitOK, "datasets/sums")
		importSumsTest(t, r.url)
		whale(t, "init", "--root", r.url, exp).mustCode(t, exitOK)

		whale(t, "plan", "--root", r.url, "sums").mustCode(t, exitOK,
			"next: rollout at r001-w01", "input tasks: datasets/sums", "harness: h0")
		whale(t, "plan", "--root", r.url, "--json", "sums").mustCode(t, exitOK, `"stage": "rollout"`, `"position": "r001-w01"`)
		whale(t, "step", "--root", r.url, "sums").mustCode(t, exitOK, "rollout at r001-w01: committed")
		whale(t, "plan", "--root", r.url, "sums").mustCode(t, exitOK, "next: filter at r001-w01")

		// Rerunning a committed stage is a no-op; --force makes a new attempt.
		whale(t, "stage", "--root", r.url, "--at", "r001-w01", "rollout", "sums").mustCode(t, exitOK, "already committed")
		whale(t, "stage", "--root", r.url, "--at", "r001-w01", "--force", "rollout", "sums").mustCode(t, exitOK, "r001-w01-rollout.a2")
		whale(t, "stage", "--root", r.url, "--at", "r009-w01", "rollout", "sums").mustCode(t, exitFailure, "has not reached position r009-w01")
		whale(t, "stage", "--root", r.url, "--at", "r001-w01", "propose", "sums").mustCode(t, exitFailure, "runs rollout, filter, finetune, not propose")
		whale(t, "stage", "rollout", "sums", "--root", r.url, "--at", "r002-t").mustCode(t, exitUsage, `--at: invalid position "r002-t"`)

		// Two steps at once, as two cron ticks: one runs the (slowed)
		// rollout, the other says the run is busy and exits 0.
		whale(t, "step", "--root", r.url, "sums").mustCode(t, exitOK, "filter at r001-w01")
		whale(t, "step", "--root", r.url, "sums").mustCode(t, exitOK, "finetune at r001-w01: committed", "trained=true")
		slow.Store("on", true)
		results := make([]cliResult, 2)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = whale(t, "step", "--root", r.url, "sums") }()
		}
		wg.Wait()
		busy := 0
		for _, res := range results {
			res.mustCode(t, exitOK)
			if strings.Contains(res.stdout, "is busy") && strings.Contains(res.stdout, "held by") {
				busy++
			}
		}
		if busy != 1 {
			t.Errorf("%d of two concurrent steps reported a busy run, want 1:\n%s\n%s", busy, results[0].stdout, results[1].stdout)
		}
		slow.Delete("on")

		run := whale(t, "run", "--root", r.url, "sums")
		run.mustCode(t, exitOK, "finetune at r001-w02: committed", "evaluate at r001-wt: committed", "run sums is done")
		whale(t, "plan", "--root", r.url, "sums").mustCode(t, exitOK, "done:")
		whale(t, "run", "--root", r.url, "sums").mustCode(t, exitOK, "run sums is done")

		whale(t, "plan", "--root", r.url, "nope").mustCode(t, exitUsage, `no run "nope"`)
		whale(t, "step", "--root", r.url).mustCode(t, exitUsage, "exactly one run")
	})
}
