package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/chess"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

// importFile reads a testdata file through the importer a user's
// `whale data import` would use.
func importFile(t *testing.T, path string, f importers.Format, opts importers.Options) []schemas.Task {
	t.Helper()
	var tasks []schemas.Task
	err := importers.ImportFile(context.Background(), path, f, opts, func(task schemas.Task) error {
		tasks = append(tasks, task)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) == 0 {
		t.Fatalf("%s holds no tasks", path)
	}
	return tasks
}

func lookup(t *testing.T, name string, res registry.Resources) *world {
	t.Helper()
	dom, err := registry.Lookup(name, res)
	if err != nil {
		t.Fatal(err)
	}
	return &world{name: name, dom: dom}
}

// corpusIndex is a BM25 index of the shipped search-QA corpus.
func corpusIndex(t *testing.T) *searchqa.Index {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "index")
	if _, err := searchqa.BuildIndex(context.Background(), dir, searchqa.FileCorpus("../../../domains/searchqa/testdata/corpus.jsonl"), searchqa.BuildOptions{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	idx, err := searchqa.OpenIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

func lastUser(msgs []schemas.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}

// Search QA: the model searches for the question, then answers with the
// first gold answer or a wrong one. Retrieval is a BM25 index of the
// shipped corpus.
func TestSearchQA(t *testing.T) {
	w := lookup(t, "searchqa", registry.Resources{Retriever: corpusIndex(t)})
	w.base = "h0-tags" // the Search-R1 tags this fake model writes
	w.tasks = importFile(t, "../../../domains/searchqa/testdata/questions.jsonl", importers.FormatJSONL, importers.Options{})
	w.anchor, w.edit = `SYSTEM_PROMPT = ""`, `SYSTEM_PROMPT = "`+marker+`"`
	const wrong = "nobody knows"
	w.find = func(msgs []schemas.Message) (schemas.Task, error) {
		for _, m := range msgs {
			if m.Role != "user" {
				continue
			}
			for _, task := range w.tasks {
				if strings.Contains(m.Content, "Question: "+task.Question+"\n") {
					return task, nil
				}
			}
		}
		return schemas.Task{}, fmt.Errorf("no known question in %+v", msgs)
	}
	w.reply = func(task schemas.Task, msgs []schemas.Message, right bool, _ int64) (string, error) {
		if len(msgs) == 1 || len(msgs) == 2 && msgs[0].Role == "system" {
			return "<think>I should look this up.</think>\n<search> " + task.Question + " </search>", nil
		}
		if !strings.Contains(lastUser(msgs), "<information>Doc 1(Title: ") {
			return "", fmt.Errorf("the second call has no search results: %q", lastUser(msgs))
		}
		if right {
			return "<think>The passage says so.</think>\n<answer> " + task.Answers[0] + " </answer>", nil
		}
		return "<answer>" + wrong + "</answer>", nil
	}
	w.expect = func(task schemas.Task, right bool, _ int64) outcome {
		if right {
			return outcome{true, 2, task.Answers[0]}
		}
		return outcome{false, 2, wrong}
	}
	playWorld(t, w)
}

// Math: the model answers at once in \boxed{}, the gold answer or one more.
// No code runner is configured; the model never asks for one.
func TestMath(t *testing.T) {
	w := lookup(t, "math", registry.Resources{})
	w.base = "h0-tags" // the boxed answer as the first user message's reply
	w.tasks = importFile(t, "../../../domains/math/testdata/problems.jsonl", importers.FormatJSONL, importers.Options{})
	w.anchor = `SYSTEM_PROMPT = "Please reason step by step,`
	w.edit = `SYSTEM_PROMPT = "` + marker + ` Please reason step by step,`
	wrong := func(task schemas.Task) (string, error) {
		n, err := strconv.Atoi(task.Answers[0])
		if err != nil {
			return "", fmt.Errorf("task %s: the fake model only knows integer answers: %w", task.ID, err)
		}
		return strconv.Itoa(n + 1), nil
	}
	for _, task := range w.tasks {
		if _, err := wrong(task); err != nil {
			t.Fatal(err)
		}
	}
	w.find = func(msgs []schemas.Message) (schemas.Task, error) {
		for _, task := range w.tasks {
			for _, m := range msgs {
				if m.Role == "user" && m.Content == task.Question {
					return task, nil
				}
			}
		}
		return schemas.Task{}, fmt.Errorf("no known problem in %+v", msgs)
	}
	w.reply = func(task schemas.Task, _ []schemas.Message, right bool, _ int64) (string, error) {
		ans := task.Answers[0]
		if !right {
			ans, _ = wrong(task)
		}
		return "Working it through, the result is $\\boxed{" + ans + "}$.", nil
	}
	w.expect = func(task schemas.Task, right bool, _ int64) outcome {
		if right {
			return outcome{true, 1, task.Answers[0]}
		}
		ans, _ := wrong(task)
		return outcome{false, 1, ans}
	}
	playWorld(t, w)
}

// chessStep is one solver move of a puzzle: the position the model is
// shown, the solution's move and a legal move that fails the puzzle.
type chessStep struct {
	task           schemas.Task
	step           int
	expected, fail string
}

// chessPlan walks every puzzle's solution with the chess domain's own
// puzzle type, so the fake model can find its position by FEN.
func chessPlan(t *testing.T, tasks []schemas.Task) (byFEN map[string]chessStep, solver map[string][]chessStep) {
	t.Helper()
	byFEN, solver = map[string]chessStep{}, map[string][]chessStep{}
	for _, task := range tasks {
		var meta importers.LichessMeta
		if err := json.Unmarshal([]byte(task.Meta), &meta); err != nil {
			t.Fatalf("puzzle %s: meta: %v", task.ID, err)
		}
		var line []string
		for i := 1; i < len(meta.Moves); i += 2 {
			line = append(line, meta.Moves[i])
		}
		z, err := chess.FromTask(task)
		if err != nil {
			t.Fatal(err)
		}
		for i, mv := range line {
			st := chessStep{task: task, step: i, expected: mv}
			// Any legal move that neither is the solution's nor mates
			// fails the puzzle; try each on a fresh copy.
			for _, cand := range z.LegalMovesUCI() {
				if cand == mv {
					continue
				}
				c, err := chess.FromTask(task)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range line[:i] {
					if _, err := c.Play(p); err != nil {
						t.Fatal(err)
					}
				}
				if out, err := c.Play(cand); err == nil && out.Failed {
					st.fail = cand
					break
				}
			}
			if st.fail == "" {
				t.Fatalf("puzzle %s step %d: no legal losing move", task.ID, i)
			}
			fen := z.FEN()
			if prev, dup := byFEN[fen]; dup {
				t.Fatalf("puzzles %s and %s share position %s", prev.task.ID, task.ID, fen)
			}
			byFEN[fen] = st
			solver[task.ID] = append(solver[task.ID], st)
			out, err := z.Play(mv)
			if err != nil || !out.Correct || (i == len(line)-1) != out.Solved {
				t.Fatalf("puzzle %s step %d: playing the solution's %s: %+v %v", task.ID, i, mv, out, err)
			}
		}
	}
	return byFEN, solver
}

// failStep is where the fake model goes wrong in an episode it does not
// solve: some step of the solution, so that puzzles fail midway too.
func failStep(taskID string, ep int64, steps int) int {
	return int(draw("fail-step", taskID, ep) % uint64(steps))
}

// Chess: the model plays the solution's move for the position it is shown,
// or, in an episode it does not solve, a legal losing move at one step.
// Puzzles from the importers' sample are the train split, the domain's
// extra puzzles the test split.
func TestChess(t *testing.T) {
	w := lookup(t, "chess", registry.Resources{})
	w.base = "h0-compact" // SAN moves, and its system prompt as the anchor
	w.tasks = append(importFile(t, "../../../importers/testdata/puzzles.csv", importers.FormatLichess, importers.Options{Domain: "chess", Split: "train"}),
		importFile(t, "../../../domains/chess/testdata/puzzles_extra.csv", importers.FormatLichess, importers.Options{Domain: "chess", Split: "test"})...)
	w.anchor = `"You are solving a chess puzzle. `
	w.edit = `"You are solving a chess puzzle. ` + marker + ` `
	byFEN, solver := chessPlan(t, w.tasks)
	at := func(msgs []schemas.Message) (chessStep, error) {
		for line := range strings.Lines(lastUser(msgs)) {
			if fen, ok := strings.CutPrefix(strings.TrimSpace(line), "FEN: "); ok {
				if st, ok := byFEN[fen]; ok {
					return st, nil
				}
				return chessStep{}, fmt.Errorf("unknown position %s", fen)
			}
		}
		return chessStep{}, errors.New("no FEN in the last user message")
	}
	w.find = func(msgs []schemas.Message) (schemas.Task, error) {
		st, err := at(msgs)
		return st.task, err
	}
	w.reply = func(task schemas.Task, msgs []schemas.Message, right bool, ep int64) (string, error) {
		st, err := at(msgs)
		if err != nil {
			return "", err
		}
		f := failStep(task.ID, ep, len(solver[task.ID]))
		switch {
		case right || st.step < f:
			return "The best move here: <move>" + st.expected + "</move>", nil
		case st.step == f:
			return "<move>" + st.fail + "</move>", nil
		}
		return "", fmt.Errorf("asked for step %d after failing at step %d", st.step, f)
	}
	w.expect = func(task schemas.Task, right bool, ep int64) outcome {
		steps := solver[task.ID]
		var played []string
		for _, st := range steps {
			played = append(played, st.expected)
		}
		if right {
			return outcome{true, len(steps), strings.Join(played, " ")}
		}
		f := failStep(task.ID, ep, len(steps))
		return outcome{false, f + 1, strings.Join(append(played[:f], steps[f].fail), " ")}
	}
	playWorld(t, w)
}
