package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/storage"
)

// TestInitialNamedHarness: harness.initial names a built-in variant
// (math's h0-tags). init stores its source in the root's archive before
// run.json, the planner hands the rollout its content id, and the rollout
// plays it: the model sees its system prompt, and the rows carry its id.
// An unknown name is refused at init, naming the domain's harnesses.
func TestInitialNamedHarness(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()
		var tasks strings.Builder
		for i := range 3 {
			fmt.Fprintf(&tasks, `{"id": "sum-%d", "question": "What is %d + 1?", "answer": "%d"}`+"\n", i, i, i+1)
		}
		data := writeFile(t, "sums.jsonl", tasks.String())
		srv := modeltest.NewServer(t, func(req *modeltest.Request) modeltest.Reply {
			// h0-tags has a system prompt and the question as the user
			// message; the paper's h0 has no system prompt.
			if len(req.Messages) < 2 || req.Messages[0].Role != "system" || !strings.Contains(req.Messages[0].Content, "step by step") {
				return modeltest.Reply{Content: "not h0-tags"}
			}
			return modeltest.Reply{Content: `\boxed{1}`}
		})
		src := `name: tags
domain: math
schedule: weights-only
data: {train: datasets/sums, test: datasets/sums-test}
model: {name: fake-model, endpoints: [%q], concurrency: 2}
rsft: {group_size: 2, batch_size: 3}
harness: {initial: %s}
finetune: {command: 'cp "$WHALE_SFT_JSONL" "$WHALE_OUTPUT_DIR/model.bin"', reload: none}
budget: {weight_steps: 1}
eval: {k: 2}
`
		whale(t, "data", "import", "--root", r.url, "--domain", "math", data).mustCode(t, exitOK, "datasets/sums")
		importSumsTest(t, r.url)
		bad := writeFile(t, "bad.yaml", fmt.Sprintf(src, srv.URL, "h0-compact"))
		whale(t, "init", "--root", r.url, bad).mustCode(t, exitUsage, "harness.initial", `domain math has no built-in harness "h0-compact"`, "h0, h0-tags")

		tags := builtin(t, "math", "h0-tags")
		id := harness.SourceID([]byte(tags))
		exp := writeFile(t, "tags.yaml", fmt.Sprintf(src, srv.URL, "h0-tags"))
		whale(t, "init", "--root", r.url, exp).mustCode(t, exitOK, "harness.initial h0-tags (domain math) archived as "+id)
		store, err := storage.Open(ctx, r.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		got, err := archive.Get(ctx, store, id)
		if err != nil || string(got) != tags {
			t.Fatalf("archive holds %d bytes for %s, err %v; want h0-tags's source", len(got), id, err)
		}
		whale(t, "init", "--root", r.url, exp).mustCode(t, exitOK, "nothing to do")

		whale(t, "plan", "--root", r.url, "tags").mustCode(t, exitOK, "next: rollout at r001-w01", "harness: "+id)
		whale(t, "step", "--root", r.url, "tags").mustCode(t, exitOK, "rollout at r001-w01: committed")
		m, err := storage.LatestCommitted(ctx, store, "tags", "r001-w01", pipeline.StageRollout)
		if err != nil {
			t.Fatal(err)
		}
		if m.Summary["harness_id"] != id || storage.SummaryNumber(m.Summary, "mean_reward") <= 0 {
			t.Errorf("rollout summary %v, want harness_id %s and some reward", m.Summary, id)
		}
	})
}
