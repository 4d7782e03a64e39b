package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
)

// fakeModel is a FAKE model server (modeltest) that replies from a script.
func fakeModel(t *testing.T, replies ...string) *modeltest.Server {
	t.Helper()
	rs := make([]modeltest.Reply, len(replies))
	for i, r := range replies {
		rs[i] = modeltest.Reply{Content: r}
	}
	return modeltest.NewServer(t, modeltest.Script(rs...))
}

// Local task files: one line a task, as users bring them.
const (
	chessTasks = `{"id": "two-mates", "domain": "chess", "question": "r5k1/5ppp/8/8/8/8/5PPP/3RR1K1 b - - 0 30", "answers": ["a8a2 d1d8"]}
{"id": "long", "domain": "chess", "question": "r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24", "answers": ["f2g3 e6e7 b2b1 b3c1 b1c1 h6c1"]}
{"id": "bad-line", "domain": "chess", "question": "r5k1/5ppp/8/8/8/8/5PPP/3RR1K1 b - - 0 30", "answers": ["a8a2 e2e4"]}
{"id": "a-sum", "domain": "math", "question": "1+1?", "answers": ["2"]}
`
	mathTasks = `{"id": "math-004", "question": "Find the sum of all positive divisors of $360$.", "answer": "1170", "domain": "math"}
`
	searchTasks = "../../domains/searchqa/testdata/questions.jsonl"
)

func TestHarnessRunChess(t *testing.T) {
	tasks := writeFile(t, "tasks.jsonl", chessTasks)
	srv := fakeModel(t, "Rook lift. <move>e6e7</move>", "<move>e2e4</move>", "<move>Nc1</move>", "<move>Qxc1</move>")
	r := whale(t, "harness", "run", chessCompact, "--domain", "chess", "--tasks", tasks, "--task", "long",
		"--endpoint", srv.URL, "--model", "fake-model", "--seed", "5", "--temperature", "0.7")
	r.mustCode(t, exitOK, "harness  "+chessCompact+" (sha256:", "task     long (chess)",
		"[system]\nYou are solving a chess puzzle", "[user]\nYour opponent played f2g3. You play white.",
		"──── turn 1  chat: finish=stop", "[assistant]\nRook lift. <move>e6e7</move>", `» env move "e6e7" →`,
		"──── turn 2", `» env move "e2e4" → illegal: illegal move`, "That action is not allowed",
		"──── turn 4", "reward   1 (correct: true)", `answer   "e6e7 b3c1 h6c1"`, "finish   answer", "turns    4", "tokens   ")
	reqs := srv.Requests()
	if len(reqs) != 4 || reqs[0].Body["seed"] != 5.0 || reqs[1].Body["seed"] != 6.0 || reqs[0].Body["temperature"] != 0.7 || reqs[0].Body["max_tokens"] != 8192.0 {
		t.Errorf("%d requests; first body %v", len(reqs), reqs[0].Body)
	}
	// Turns appear in order, each reply before what the environment made of it.
	out := r.stdout
	if !(strings.Index(out, "turn 1") < strings.Index(out, "turn 2") && strings.Index(out, "turn 2") < strings.Index(out, `move "e2e4"`) &&
		strings.Index(out, `move "e2e4"`) < strings.Index(out, "turn 3")) {
		t.Errorf("turns out of order:\n%s", out)
	}

	// The first chess task is the default; a harness file and --json.
	hfile := writeFile(t, "h.star", builtin(t, "chess", "h0-compact")+"\nMAX_TOKENS = 64\n")
	srv = fakeModel(t, "<move>Re8#</move>")
	r = whale(t, "harness", "run", hfile, "--domain", "chess", "--tasks", tasks, "--endpoint", srv.URL, "--model", "m", "--json", "--max-tokens", "32")
	r.mustCode(t, exitOK)
	var row schemas.Rollout
	if err := json.Unmarshal([]byte(r.stdout), &row); err != nil {
		t.Fatalf("--json output is not a rollout row: %v\n%s", err, r.stdout)
	}
	src := builtin(t, "chess", "h0-compact") + "\nMAX_TOKENS = 64\n"
	if row.TaskID != "two-mates" || row.Reward != 1 || !row.Correct || row.Answer != "e1e8" || row.FinishReason != "answer" ||
		row.HarnessID != harness.SourceID([]byte(src)) || row.ModelID != "m" || len(row.Messages) != 3 || len(row.Trace) == 0 {
		t.Errorf("row = %+v", row)
	}
	if got := srv.Requests()[0].Body["max_tokens"]; got != 32.0 {
		t.Errorf("max_tokens = %v, want 32 (--max-tokens over the harness's 64)", got)
	}
}

// The tag-based built-in harnesses as files: the scripted replies of these
// tests are written for them (each domain's h0 is the paper's).
const (
	chessCompact = "../../domains/chess/h0-compact.star"
	searchTags   = "../../domains/searchqa/h0-tags.star"
	mathTags     = "../../domains/math/h0-tags.star"
)

// builtin is the source of a domain's built-in harness.
func builtin(t *testing.T, domain, name string) string {
	t.Helper()
	e, err := registry.Get(domain)
	if err != nil {
		t.Fatal(err)
	}
	src, err := e.Harness(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// A dataset in the bucket serves as --tasks too.
func TestHarnessRunDataset(t *testing.T) {
	root := fileRoot(t)
	whale(t, "data", "import", puzzlesCSV, "--name", "puzzles", "--root", root.url).mustCode(t, exitOK)
	srv := fakeModel(t, "<move>d1d8</move>")
	whale(t, "harness", "run", "h0", "--domain", "chess", "--tasks", "puzzles", "--root", root.url, "--task", "0a1Bc",
		"--endpoint", srv.URL, "--model", "m").mustCode(t, exitOK, "task     0a1Bc (chess)", "reward   1", `answer   "d1d8"`)
	whale(t, "harness", "run", "h0", "--domain", "chess", "--tasks", "nope", "--root", root.url, "--task", "0a1Bc",
		"--endpoint", srv.URL, "--model", "m").mustCode(t, exitUsage, `no committed dataset "nope"`)
	whale(t, "harness", "run", "h0", "--domain", "chess", "--tasks", "puzzles", "--root", root.url, "--task", "zzz",
		"--endpoint", srv.URL, "--model", "m").mustCode(t, exitUsage, `no task "zzz" among the 5 tasks of puzzles`)
}

func TestHarnessRunSearchQA(t *testing.T) {
	root := fileRoot(t)
	whale(t, "index", "build", searchCorpus, "--name", "wiki-test", "--root", root.url).mustCode(t, exitOK)
	replies := []string{"<think>Who wrote it?</think><search>Frankenstein novel author</search>", "<answer>Mary Shelley</answer>"}

	srv := fakeModel(t, replies...)
	whale(t, "harness", "run", searchTags, "--domain", "searchqa", "--tasks", searchTasks, "--task", "sqa-1", "--root", root.url,
		"--index", "wiki-test", "--cache", t.TempDir(), "--endpoint", srv.URL, "--model", "m").
		mustCode(t, exitOK, "[user]\nAnswer the given question.", `» tool search("Frankenstein novel author") →`,
			"<information>Doc 1(Title: Frankenstein)", "reward   1 (correct: true)", `answer   "Mary Shelley"`)

	// The same through a Search-R1 retrieval server.
	fake := &fakeRetriever{passages: []searchqa.Passage{{ID: "9", Title: "Fake", Contents: "\"Fake\"\nMary Shelley wrote it.", Score: 1}}}
	rs := httptest.NewServer(searchqa.NewServer(fake))
	defer rs.Close()
	srv = fakeModel(t, replies...)
	whale(t, "harness", "run", searchTags, "--domain", "searchqa", "--tasks", searchTasks, "--task", "sqa-1",
		"--retriever", rs.URL, "--endpoint", srv.URL, "--model", "m").
		mustCode(t, exitOK, "<information>Doc 1(Title: Fake) Mary Shelley wrote it.</information>", "reward   1")
	if len(fake.queries) != 1 || fake.queries[0] != "Frankenstein novel author" {
		t.Errorf("retriever got %q", fake.queries)
	}

	// No retriever: the search fails, the episode goes on.
	srv = fakeModel(t, replies...)
	whale(t, "harness", "run", searchTags, "--domain", "searchqa", "--tasks", searchTasks, "--task", "sqa-1", "--endpoint", srv.URL, "--model", "m").
		mustCode(t, exitOK, "tool error: no retriever configured", "reward   1")
}

// A retrieval server that wants a token (whale index serve with
// WHALE_SERVE_TOKEN) answers the searches of --retriever-api-key-env's
// token, refuses those without it (the episode goes on, the search
// failed), and an unset variable is bad input; the model's key is never
// sent to it.
func TestHarnessRunRetrieverToken(t *testing.T) {
	const token = "idx-7f3a9c2e51"
	fake := &fakeRetriever{passages: []searchqa.Passage{{ID: "9", Title: "Fake", Contents: "\"Fake\"\nMary Shelley wrote it.", Score: 1}}}
	h := searchqa.NewServerWithOptions(fake, searchqa.ServerOptions{Token: token})
	var auths []string // what came in Authorization
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auths = append(auths, r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	}))
	defer rs.Close()
	replies := []string{"<search>Frankenstein novel author</search>", "<answer>Mary Shelley</answer>"}
	args := []string{"harness", "run", searchTags, "--domain", "searchqa", "--tasks", searchTasks, "--task", "sqa-1", "--retriever", rs.URL, "--model", "m"}

	t.Setenv("WHALE_TEST_SERVE_TOKEN", token)
	t.Setenv("WHALE_TEST_MODEL_KEY", "sk-model-key-0123456789")
	srv := fakeModel(t, replies...)
	whale(t, append(args, "--endpoint", srv.URL, "--retriever-api-key-env", "WHALE_TEST_SERVE_TOKEN", "--api-key-env", "WHALE_TEST_MODEL_KEY")...).
		mustCode(t, exitOK, "<information>Doc 1(Title: Fake) Mary Shelley wrote it.</information>", "reward   1")
	if len(fake.queries) != 1 {
		t.Fatalf("retriever got %q", fake.queries)
	}

	srv = fakeModel(t, replies...)
	r := whale(t, append(args, "--endpoint", srv.URL, "--api-key-env", "WHALE_TEST_MODEL_KEY")...)
	r.mustCode(t, exitOK, "search failed", "401")
	if len(fake.queries) != 1 || strings.Contains(r.stdout, token) {
		t.Errorf("without the token: the retriever got %q; output:\n%s", fake.queries, r.stdout)
	}
	if len(auths) != 2 || auths[0] != "Bearer "+token || auths[1] != "" {
		t.Errorf("the retriever got Authorization %q", auths)
	}

	t.Setenv("WHALE_TEST_SERVE_TOKEN", "")
	whale(t, append(args, "--endpoint", srv.URL, "--retriever-api-key-env", "WHALE_TEST_SERVE_TOKEN")...).
		mustCode(t, exitUsage, "--retriever-api-key-env WHALE_TEST_SERVE_TOKEN", "not set")
	whale(t, "harness", "run", "h0", "--domain", "searchqa", "--tasks", searchTasks, "--endpoint", srv.URL, "--model", "m",
		"--retriever-api-key-env", "WHALE_TEST_SERVE_TOKEN").mustCode(t, exitUsage, "pass --retriever")
}

// fakeRetriever is a FAKE searchqa.Retriever that answers every query with
// the same passages.
type fakeRetriever struct {
	passages []searchqa.Passage
	queries  []string
}

func (f *fakeRetriever) Retrieve(_ context.Context, queries []string, topk int) ([][]searchqa.Passage, error) {
	f.queries = append(f.queries, queries...)
	out := make([][]searchqa.Passage, len(queries))
	for i := range out {
		out[i] = f.passages[:min(topk, len(f.passages))]
	}
	return out, nil
}

func TestHarnessRunMath(t *testing.T) {
	tasks := writeFile(t, "math.jsonl", mathTasks)
	code := "```python\nprint(sum(d for d in range(1, 361) if 360 % d == 0))\n```"
	if _, err := exec.LookPath("python3"); err == nil {
		srv := fakeModel(t, code, `\boxed{1170}`)
		r := whale(t, "harness", "run", mathTags, "--domain", "math", "--tasks", tasks, "--endpoint", srv.URL, "--model", "m")
		if r.code == exitFailure && strings.Contains(r.err.Error(), "python3 cannot run here") {
			t.Logf("python3 cannot run isolated programs here: %v", r.err)
		} else {
			r.mustCode(t, exitOK, "» tool python(", "```output\n1170\n```", "reward   1", `answer   "1170"`)
		}
	}
	// CODE_TOOL off needs no runner: the code block is not an action.
	hfile := writeFile(t, "h.star", strings.Replace(builtin(t, "math", "h0-tags"), "CODE_TOOL = True", "CODE_TOOL = False", 1))
	srv := fakeModel(t, code, `\boxed{1171}`)
	whale(t, "harness", "run", hfile, "--domain", "math", "--tasks", tasks, "--endpoint", srv.URL, "--model", "m").
		mustCode(t, exitOK, "no final answer", "reward   0 (correct: false)", `answer   "1171"`)
}

func TestHarnessRunErrors(t *testing.T) {
	tasks := writeFile(t, "tasks.jsonl", chessTasks)
	srv := fakeModel(t, "<move>d1d8</move>")
	bad := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Fault: modeltest.FaultStatus, Status: 400}))
	badHarness := writeFile(t, "bad.star", "MAX_TURNS = \"many\"\n")
	failing := writeFile(t, "failing.star", "def parse_action(text, state):\n    return 1 // 0\n")
	model := []string{"--endpoint", srv.URL, "--model", "m"}
	tests := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"no file", []string{"--domain", "chess", "--tasks", tasks}, exitUsage, []string{"one harness file"}},
		{"no domain", []string{"h0", "--tasks", tasks}, exitUsage, []string{"--domain", "chess, demo, math, searchqa"}},
		{"unknown domain", []string{"h0", "--domain", "go", "--tasks", tasks}, exitUsage, []string{`"go"`, "chess, demo, math, searchqa"}},
		{"no tasks", []string{"h0", "--domain", "chess"}, exitUsage, []string{"--tasks"}},
		{"missing tasks file", []string{"h0", "--domain", "chess", "--tasks", "/nonexistent/t.jsonl"}, exitUsage, []string{"/nonexistent/t.jsonl"}},
		{"no such task", []string{"h0", "--domain", "chess", "--tasks", tasks, "--task", "zzz"}, exitUsage, []string{`no task "zzz" among the 4 tasks`}},
		{"task of another domain", []string{"h0", "--domain", "chess", "--tasks", tasks, "--task", "a-sum"}, exitUsage, []string{"a-sum", "domain math"}},
		{"no task of the domain", []string{"h0", "--domain", "searchqa", "--tasks", tasks}, exitUsage, []string{"no task of domain searchqa"}},
		{"bad puzzle", []string{"h0", "--domain", "chess", "--tasks", tasks, "--task", "bad-line"}, exitUsage, []string{"bad-line", "e2e4"}},
		{"bad harness", []string{badHarness, "--domain", "chess", "--tasks", tasks}, exitUsage, []string{"bad.star:1", "MAX_TURNS"}},
		{"retriever for chess", []string{"h0", "--domain", "chess", "--tasks", tasks, "--retriever", "http://127.0.0.1:1"}, exitUsage, []string{"--retriever", "searchqa"}},
		{"no model name", []string{"h0", "--domain", "chess", "--tasks", tasks, "--endpoint", srv.URL}, exitUsage, []string{"--model"}},
		{"unset key variable", []string{"h0", "--domain", "chess", "--tasks", tasks, "--api-key-env", "WHALE_TEST_UNSET_KEY"}, exitUsage, []string{"WHALE_TEST_UNSET_KEY"}},
		{"model refuses", []string{"h0", "--domain", "chess", "--tasks", tasks, "--endpoint", bad.URL, "--model", "m"}, exitFailure, []string{"episode failed", "model"}},
		{"hook fails", []string{failing, "--domain", "chess", "--tasks", tasks}, exitUsage, []string{"hook parse_action", "failing.star:2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"harness", "run"}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "--endpoint") {
				args = append(args, model...)
			}
			whale(t, args...).mustCode(t, tt.code, tt.wants...)
		})
	}
}

// Each shipped h0 passes whale harness check for its domain, with no
// warnings.
func TestBaselinesPassHarnessCheck(t *testing.T) {
	for _, name := range registry.Names() {
		t.Run(name, func(t *testing.T) {
			whale(t, "harness", "check", "../../domains/"+name+"/h0.star", "--domain", name).
				mustCode(t, exitOK, "domain   "+name, "warnings: 0")
		})
	}
}
