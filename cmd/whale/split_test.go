package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// poolJSONL is n demo tasks whose questions differ.
func poolJSONL(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "%s-%d", "question": "What is %d + %d? (%s)", "answers": ["%d"], "domain": "demo"}`+"\n", prefix, i, i, i%9, prefix, i+i%9)
	}
	return b.String()
}

// splitExperiment is a small demo experiment on the three datasets.
func splitExperiment(t *testing.T, name, train, search, test string) string {
	t.Helper()
	ckpt, err := filepath.Abs("../../domains/demo/testdata/pretrained.wlm")
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name+".yaml", fmt.Sprintf(`name: %s
domain: demo
schedule: whale
switch: {fixed: {epochs: 0.2, iterations: 2}}
data: {train: datasets/%s, search: datasets/%s, test: datasets/%s}
model: {name: demo-local, checkpoint: %q, max_tokens: 48, concurrency: 16}
rsft: {group_size: 2, batch_size: 16}
budget: {rollouts: 64}
eval: {k: 1}
`, name, train, search, test, ckpt))
}

// whale data split on an imported dataset, its errors and their exit
// codes, and whale init refusing datasets that share tasks.
func TestDataSplit(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		pool := writeFile(t, "pool.jsonl", poolJSONL("p", 600))
		whale(t, "data", "import", "--root", r.url, "--name", "pool", pool).mustCode(t, exitOK)

		res := whale(t, "data", "split", "pool", "--root", r.url, "--train", "300", "--test", "40", "--seed", "3")
		res.mustCode(t, exitOK, "split 600 tasks of dataset pool (seed 3)", "datasets/pool-train", "datasets/pool-search", "datasets/pool-test", "4 tasks in none")
		for _, re := range []string{`(?m)^\s+train\s+300 tasks\s+datasets/pool-train$`, `(?m)^\s+search\s+256 tasks\s+datasets/pool-search$`, `(?m)^\s+test\s+40 tasks\s+datasets/pool-test$`} {
			if !regexp.MustCompile(re).MatchString(res.stdout) {
				t.Errorf("output does not match %s:\n%s", re, res.stdout)
			}
		}
		store := openStore(t, r.url)
		var all []string
		for _, name := range []string{"pool-train", "pool-search", "pool-test"} {
			_, tasks := datasetTasks(t, store, name)
			for _, x := range tasks {
				if x.Split != strings.TrimPrefix(name, "pool-") {
					t.Fatalf("%s: task %s has split %q", name, x.ID, x.Split)
				}
			}
			all = append(all, taskIDs(tasks)...)
		}
		slices.Sort(all)
		if len(slices.Compact(slices.Clone(all))) != 596 {
			t.Errorf("the three datasets hold %d distinct of %d tasks, want 596 disjoint", len(slices.Compact(all)), len(all))
		}
		whale(t, "ls", "--root", r.url).mustCode(t, exitOK, "pool-train", "pool-search", "pool-test")
		whale(t, "data", "split", "pool", "--root", r.url, "--train", "300", "--test", "40", "--seed", "3").
			mustCode(t, exitOK, "already there: nothing to do")

		// The same tasks in another order split the same way.
		var lines []string
		for l := range strings.Lines(poolJSONL("p", 600)) {
			lines = append(lines, l)
		}
		slices.Reverse(lines)
		whale(t, "data", "import", "--root", r.url, "--name", "pool-rev", writeFile(t, "rev.jsonl", strings.Join(lines, ""))).mustCode(t, exitOK)
		whale(t, "data", "split", "pool-rev", "--root", r.url, "--train", "300", "--test", "40", "--seed", "3").mustCode(t, exitOK)
		for _, role := range []string{"train", "search", "test"} {
			_, a := datasetTasks(t, store, "pool-"+role)
			_, b := datasetTasks(t, store, "pool-rev-"+role)
			ia, ib := taskIDs(a), taskIDs(b)
			slices.Sort(ia)
			slices.Sort(ib)
			if !slices.Equal(ia, ib) {
				t.Errorf("%s: the reversed file split differently", role)
			}
		}

		for _, c := range []struct {
			name string
			args []string
			code int
			want []string
		}{
			{"too many", []string{"pool", "--train", "400", "--test", "40"}, exitUsage,
				[]string{"--train 400 + --search 256 + --test 40 = 696 tasks, but dataset pool has 600"}},
			{"negative", []string{"pool", "--train", "10", "--test", "-3"}, exitUsage, []string{"--test -3: a count of tasks cannot be negative"}},
			{"unknown dataset", []string{"nope", "--test", "3"}, exitUsage, []string{"no dataset nope in", "whale data import"}},
			{"taken by another split", []string{"pool", "--train", "300", "--test", "40", "--seed", "4"}, exitConflict,
				[]string{"dataset pool-test was made from other data", "use another name"}},
			{"two datasets", []string{"pool", "pool-rev", "--test", "3"}, exitUsage, []string{"one dataset name, got 2"}},
			{"bad name", []string{"pool", "--test", "3", "--test-name", "Bad_Name"}, exitUsage, []string{"--test-name", "invalid dataset name"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				res := whale(t, append([]string{"data", "split", "--root", r.url}, c.args...)...)
				res.mustCode(t, c.code)
				for _, w := range c.want {
					if !strings.Contains(res.err.Error(), w) {
						t.Errorf("error %q does not say %q", res.err, w)
					}
				}
			})
		}

		// init: the split datasets pass; a test set holding train's tasks
		// is refused, naming them.
		whale(t, "init", "--root", r.url, splitExperiment(t, "good", "pool-train", "pool-search", "pool-test")).mustCode(t, exitOK, "initialized run good")
		whale(t, "data", "import", "--root", r.url, "--name", "leaky", writeFile(t, "leaky.jsonl",
			poolJSONL("q", 5)+`{"id": "x-1", "question": "  what IS 7 + 7?   (P)", "answers": ["14"], "domain": "demo"}`+"\n")).mustCode(t, exitOK)
		_, trainTasks := datasetTasks(t, store, "pool-train")
		shared := trainTasks[0].ID
		whale(t, "data", "import", "--root", r.url, "--name", "leaky-ids", writeFile(t, "leaky-ids.jsonl",
			poolJSONL("q", 5)+fmt.Sprintf(`{"id": %q, "question": "something else", "answers": ["1"], "domain": "demo"}`+"\n", shared))).mustCode(t, exitOK)
		for _, c := range []struct {
			name, test string
			want       []string
		}{
			{"same id", "leaky-ids", []string{"1 shared task ids", fmt.Sprintf(`same id: data.test datasets/leaky-ids task %q ("something else") and data.train datasets/pool-train task %q`, shared, shared)}},
			{"same dataset", "pool-train", []string{"data.train and data.test datasets/pool-train name the same dataset"}},
		} {
			t.Run("init "+c.name, func(t *testing.T) {
				res := whale(t, "init", "--root", r.url, splitExperiment(t, "leak", "pool-train", "pool-search", c.test))
				res.mustCode(t, exitUsage)
				for _, w := range c.want {
					if !strings.Contains(res.err.Error(), w) {
						t.Errorf("error does not say %q:\n%v", w, res.err)
					}
				}
				whale(t, "status", "--root", r.url, "leak").mustCode(t, exitUsage)
			})
		}
		// The same question, up to case and spaces, is the same task:
		// seed 3 puts p-7 ("What is 7 + 7? (p)") in pool-train.
		if !slices.Contains(taskIDs(trainTasks), "p-7") {
			t.Fatal("fixture: p-7 is not in pool-train")
		}
		res = whale(t, "init", "--root", r.url, splitExperiment(t, "qleak", "pool-train", "pool-search", "leaky"))
		res.mustCode(t, exitUsage)
		if !strings.Contains(res.err.Error(), `same question: data.test datasets/leaky task "x-1" ("what IS 7 + 7? (P)") and data.train datasets/pool-train task "p-7" ("What is 7 + 7? (p)")`) {
			t.Errorf("error: %v", res.err)
		}
		// A dataset not imported yet is not checked, and init says so.
		whale(t, "init", "--root", r.url, splitExperiment(t, "later", "pool-train", "pool-search", "not-yet")).
			mustCode(t, exitOK, "note: data.test datasets/not-yet is not in", "not checked")
	})
}

// importSumsTest imports datasets/sums-test, math tasks that no "sums"
// training set of these tests holds: init wants train and test disjoint.
func importSumsTest(t *testing.T, root string) {
	t.Helper()
	data := writeFile(t, "sums-test.jsonl", `{"id": "sum-test-0", "question": "What is 100 + 1?", "answer": "101"}
{"id": "sum-test-1", "question": "What is 200 + 2?", "answer": "202"}
`)
	whale(t, "data", "import", "--root", root, "--domain", "math", "--name", "sums-test", data).mustCode(t, exitOK, "datasets/sums-test")
}
