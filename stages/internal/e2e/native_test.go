package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/jobs/trainers"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/filter"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/internal/stagetest"
	"github.com/whalerun/whale/stages/rollout"
	"github.com/whalerun/whale/storage"
)

// A native world is a domain played with native tools: the harness
// offering them, and the fake model's two calls of every episode (a tool
// call, then the answer read from the tool's result).
type nativeWorld struct {
	name    string
	res     func(t *testing.T) registry.Resources
	tasks   []schemas.Task
	harness string
	// call is the first reply's tool call for task; answer the second
	// reply's content, from the tool message's text.
	call   func(task schemas.Task) modeltest.ToolCall
	answer func(tool string) (string, error)
}

var nativeWorlds = []nativeWorld{
	{
		name: "searchqa",
		res:  func(t *testing.T) registry.Resources { return registry.Resources{Retriever: corpusIndex(t)} },
		harness: `TOOLS = ["search"]
TOPK = 1
SYSTEM_PROMPT = ""
USER_PROMPT = "Answer with <answer></answer>; search if you need to. Question: {question}"

def parse_action(text, state):
    a = extract_answer(text)
    if a == None:
        return {"kind": "invalid", "error": "no <answer>"}
    return {"kind": "answer", "answer": a}
`,
		call: func(task schemas.Task) modeltest.ToolCall {
			args, _ := json.Marshal(map[string]any{"query_list": []string{task.Question}})
			return modeltest.ToolCall{ID: "call-" + task.ID, Name: "search", Arguments: string(args)}
		},
		// The fake model answers with the gold answer of the task whose
		// question it searched for: the test's tasks know it.
		answer: nil,
	},
	{
		name: "math",
		res: func(t *testing.T) registry.Resources {
			if _, err := exec.LookPath("python3"); err != nil {
				t.Skip("python3 is not installed: the local sandbox cannot run")
			}
			r, err := mathdomain.NewLocalPython(context.Background(), mathdomain.LocalPythonOptions{Timeout: 20 * time.Second, Log: quiet})
			if errors.Is(err, mathdomain.ErrNoSandbox) && os.Getenv("CI") != "true" {
				t.Skipf("the local sandbox cannot run here (make tools installs bubblewrap): %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			return registry.Resources{CodeRunner: r}
		},
		harness: `TOOLS = ["code_interpreter"]
SYSTEM_PROMPT = ""

def parse_action(text, state):
    a = extract_boxed(text)
    if a == None:
        return {"kind": "invalid", "error": "no \\boxed{} answer"}
    return {"kind": "answer", "answer": a}
`,
		call: func(task schemas.Task) modeltest.ToolCall {
			args, _ := json.Marshal(map[string]any{"code": "print(" + task.Answers[0] + ")"})
			return modeltest.ToolCall{ID: "call-" + task.ID, Name: "code_interpreter", Arguments: string(args)}
		},
		answer: func(tool string) (string, error) {
			m := regexp.MustCompile(`^(-?\d+)\s*$`).FindStringSubmatch(tool)
			if m == nil {
				return "", fmt.Errorf("tool result %q is not a number", tool)
			}
			return `So the answer is \boxed{` + m[1] + `}.`, nil
		},
	},
}

// TestNativeToolsEndToEnd plays search QA with the native search tool over
// the BM25 index of the shipped corpus, and math with code_interpreter on
// the local sandbox, through rollout, filter, finetune (the command backend
// running the reference trainer's data path with a Qwen3-like chat
// template) and evaluate, on file:// and S3. The SFT table holds the tool
// calls, tool messages and reasoning in the order the model saw them, and
// the trainer renders them with the template, tools included, as the
// server would.
func TestNativeToolsEndToEnd(t *testing.T) {
	py := trainerPython(t)
	for _, w := range nativeWorlds {
		t.Run(w.name, func(t *testing.T) {
			file := map[string]string{"searchqa": "questions.jsonl", "math": "problems.jsonl"}[w.name]
			w.tasks = importFile(t, filepath.Join("../../../domains", w.name, "testdata", file), importers.FormatJSONL, importers.Options{})
			res := w.res(t)
			onEachRoot(t, func(t *testing.T, s *storage.Store) { nativeEndToEnd(t, w, res, s, py) })
		})
	}
}

func nativeEndToEnd(t *testing.T, w nativeWorld, res registry.Resources, s *storage.Store, py string) {
	ctx := context.Background()
	dom, err := registry.Lookup(w.name, res)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.ImportTasks(t, s, w.name, w.tasks, 4)
	hid, err := archive.Put(ctx, s, []byte(w.harness))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var surprises []string
	srv := modeltest.NewServer(t, func(req *modeltest.Request) modeltest.Reply {
		msgs := req.Messages
		last := msgs[len(msgs)-1]
		if len(req.Tools) != 1 {
			mu.Lock()
			surprises = append(surprises, fmt.Sprintf("%d tools offered", len(req.Tools)))
			mu.Unlock()
		}
		if last.Role == "user" {
			for _, task := range w.tasks {
				if strings.Contains(last.Content, task.Question) {
					return modeltest.Reply{Reasoning: "I will use the tool.", ToolCalls: []modeltest.ToolCall{w.call(task)}}
				}
			}
		}
		if last.Role == "tool" && len(msgs) >= 2 && msgs[len(msgs)-2].Reasoning == "I will use the tool." {
			if w.answer != nil {
				text, err := w.answer(last.Content)
				if err == nil {
					return modeltest.Reply{Reasoning: "The tool says so.", Content: text}
				}
				mu.Lock()
				surprises = append(surprises, err.Error())
				mu.Unlock()
			}
			for _, task := range w.tasks {
				if "call-"+task.ID == last.ToolCallID && strings.Contains(last.Content, "Doc 1(Title: ") {
					return modeltest.Reply{Reasoning: "The passage says so.", Content: "<answer>" + task.Answers[0] + "</answer>"}
				}
			}
		}
		mu.Lock()
		surprises = append(surprises, fmt.Sprintf("unexpected request %+v", msgs))
		mu.Unlock()
		return modeltest.Reply{Content: "?"}
	})
	client := stagetest.Client(t, srv, model, 8)
	inputs := []stages.InputRef{{Name: "tasks", Key: "datasets/" + w.name}}

	ro := &rollout.Stage{Domain: dom, Model: client, Concurrency: 4, Log: quiet, Archive: s}
	roRes, err := stages.Execute(ctx, s, stages.Spec{Run: run, Position: "r001-w01", Inputs: inputs, Seed: rolloutSeed, Log: quiet,
		Config: rollout.Config{Domain: w.name, Harness: hid, ModelName: model, Samples: samples, Split: "train"}}, ro)
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	if len(surprises) > 0 {
		t.Fatalf("the fake model was surprised: %s", strings.Join(surprises, "; "))
	}
	rows := readTable[schemas.Rollout](t, s, roRes.Manifest, "rollouts")
	for _, r := range rows {
		if r.Reward != 1 || r.Turns != 2 || r.Error != "" || r.Tools == "" {
			t.Fatalf("rollout %s/%d: reward %v turns %d error %q tools %q", r.TaskID, r.Sample, r.Reward, r.Turns, r.Error, r.Tools)
		}
	}

	fres, err := stages.Execute(ctx, s, stages.Spec{Run: run, Position: "r001-w01", Log: quiet, Config: filter.Config{Threshold: 0.5},
		Inputs: []stages.InputRef{{Name: "rollouts", Key: roRes.Manifest.Dir}}}, filter.Stage{})
	if err != nil {
		t.Fatalf("filter: %v", err)
	}
	sft := readTable[schemas.SFTExample](t, s, fres.Manifest, "sft")
	if len(sft) != len(rows) {
		t.Fatalf("%d SFT examples from %d accepted rollouts", len(sft), len(rows))
	}
	for _, ex := range sft {
		var got []string
		for _, m := range ex.Messages {
			got = append(got, fmt.Sprintf("%s/%d/%t", m.Role, len(m.ToolCalls), m.Reasoning != ""))
		}
		if want := "user/0/false assistant/1/true tool/0/false assistant/0/true"; strings.Join(got, " ") != want {
			t.Fatalf("example %s: messages %s, want %s", ex.ExampleID, strings.Join(got, " "), want)
		}
		if ex.Messages[2].ToolCallID != ex.Messages[1].ToolCalls[0].ID || ex.Tools == "" {
			t.Fatalf("example %s: tool message answers %q, call %q; tools %q", ex.ExampleID, ex.Messages[2].ToolCallID, ex.Messages[1].ToolCalls[0].ID, ex.Tools)
		}
		if want := []bool{false, true, false, true}; fmt.Sprint(ex.TrainMask) != fmt.Sprint(want) {
			t.Fatalf("example %s: train_mask %v", ex.ExampleID, ex.TrainMask)
		}
	}

	trainer, err := filepath.Abs("../../../jobs/trainers/testdata/toy_trainer.py")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := filepath.Abs("../../../jobs/trainers/testdata/qwen3_like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ft := &finetune.Stage{Stdout: &lockedWriter{w: &out}, WorkDir: t.TempDir()}
	ftRes, err := stages.Execute(ctx, s, stages.Spec{Run: run, Position: "r001-w01", Seed: 1, Log: quiet,
		Inputs: []stages.InputRef{{Name: "sft", Key: fres.Manifest.Dir}},
		Config: finetune.Config{Command: `"$PYTHON" "$TOY_TRAINER"`, BaseCheckpoint: "toy/base", ModelName: model, LearningRate: 0.05, Epochs: 1,
			Reload: finetune.ReloadNone, Env: map[string]string{"PYTHON": py, "TOY_TRAINER": trainer, "WHALE_CHAT_TEMPLATE": tmpl, "TOY_DUMP_TRAINED": "1", "PYTHONDONTWRITEBYTECODE": "1"}}}, ft)
	if err != nil {
		t.Fatalf("finetune: %v\ntrainer output:\n%s", err, out.String())
	}
	checkTrained(t, s, ftRes.Manifest, sft)

	ev := &evaluate.Stage{Domain: dom, Model: client, Concurrency: 4, Log: quiet, Archive: s}
	tres, err := stages.Execute(ctx, s, stages.Spec{Run: run, Position: "r001-ht", Inputs: inputs, Seed: testSeed, Log: quiet,
		Config: evaluate.Config{Domain: w.name, Harnesses: []string{hid}, ModelName: model, Mode: evaluate.ModeTest, Samples: samples, Split: "test"}}, ev)
	if err != nil {
		t.Fatalf("test evaluation: %v", err)
	}
	for _, e := range readTable[schemas.Eval](t, s, tres.Manifest, "evals") {
		if e.MeanReward != 1 || e.MeanTurns != 2 {
			t.Errorf("eval of %s: mean %v turns %v", e.TaskID, e.MeanReward, e.MeanTurns)
		}
	}
	if len(surprises) > 0 {
		t.Fatalf("the fake model was surprised: %s", strings.Join(surprises, "; "))
	}
}

// checkTrained reads what the trainer rendered and trained on (the toy
// trainer's trained.jsonl in the checkpoint): the rendering holds the tool
// definitions, the question and the tool's result; the loss covers the
// model's reasoning, tool call and answer, and nothing else.
func checkTrained(t *testing.T, s *storage.Store, m *storage.Manifest, sft []schemas.SFTExample) {
	t.Helper()
	ctx := context.Background()
	files := m.Table(finetune.TableIndex)
	if len(files) != 1 {
		t.Fatalf("%d checkpoint index files", len(files))
	}
	data, err := s.ReadAll(ctx, m.FileKey(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := finetune.DecodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	var dump []byte
	for _, f := range idx.Files {
		if f.Path == "trained.jsonl" {
			if dump, err = s.ReadAll(ctx, f.Key); err != nil {
				t.Fatal(err)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(string(dump)), "\n")
	if len(lines) != len(sft) {
		t.Fatalf("the trainer trained on %d examples of %d", len(lines), len(sft))
	}
	for i, line := range lines {
		var got struct{ Text, Trained string }
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatal(err)
		}
		ex := sft[i]
		call, answer := ex.Messages[1], ex.Messages[3]
		// The first bytes: the toy tokenizer knows ASCII only.
		question, result := ex.Messages[0].Content[:20], strings.TrimSpace(ex.Messages[2].Content)
		result = result[:min(len(result), 20)]
		for _, want := range []string{"<tools>", `"name": "` + call.ToolCalls[0].Name + `"`, question, result} {
			if !strings.Contains(got.Text, want) {
				t.Errorf("example %d: the rendering lacks %q:\n%s", i, want, got.Text)
			}
		}
		for _, want := range []string{call.Reasoning, call.ToolCalls[0].Name, answer.Reasoning, answer.Content} {
			if !strings.Contains(got.Trained, want) {
				t.Errorf("example %d: the loss does not cover %q; trained on:\n%s", i, want, got.Trained)
			}
		}
		for _, not := range []string{"<tools>", question, result, "user", "tool_response"} {
			// A math answer repeats the program's output.
			if strings.Contains(got.Trained, not) && !strings.Contains(answer.Content, not) {
				t.Errorf("example %d: trained on %q, which the model did not write:\n%s", i, not, got.Trained)
			}
		}
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// trainerPython is a python3 that has torch and jinja2, for the reference
// trainer's data path; without one the test is skipped, except on CI,
// whose Makefile installs them.
func trainerPython(t *testing.T) string {
	t.Helper()
	p, err := trainers.FindPython("torch", "jinja2")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return p
}
