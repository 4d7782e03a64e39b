package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// datasetTasks reads back the tasks a committed dataset holds.
func datasetTasks(t *testing.T, s *storage.Store, name string) (*storage.Manifest, []schemas.Task) {
	t.Helper()
	ctx := context.Background()
	m, err := storage.ReadDataset(ctx, s, name)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []schemas.Task
	for _, f := range m.Table("tasks") {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), func(task schemas.Task) error {
			tasks = append(tasks, task)
			return nil
		}); err != nil {
			t.Fatalf("read %s: %v", m.FileKey(f), err)
		}
	}
	return m, tasks
}

func taskIDs(tasks []schemas.Task) []string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids
}

func jsonlTasks(n int, id func(i int) string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id": %q, "question": "What is %d squared?", "answers": ["%d"], "domain": "math", "split": "train"}`+"\n", id(i), i, i*i)
	}
	return b.String()
}

// csvIDs returns the first column of a CSV file's data lines.
func csvIDs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if i > 0 {
			id, _, _ := strings.Cut(line, ",")
			ids = append(ids, id)
		}
	}
	return ids
}

func TestImport(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()
		jsonl := writeFile(t, "squares.jsonl", jsonlTasks(4, func(i int) string { return fmt.Sprintf("sq-%d", i) }))
		gt := []string{"0", "2", "4"}
		verl := writeVerl(t, "gsm8k.parquet", []string{verlRow(0, &gt[0]), verlRow(1, &gt[1]), verlRow(2, &gt[2])})
		cases := []struct {
			name, file, format string
			flags              []string
			ids                []string
			domain, split      string
		}{
			{"puzzles", puzzlesCSV, "lichess", []string{"--split", "train"}, csvIDs(t, puzzlesCSV), "chess", "train"},
			{"puzzles-old", puzzlesOldCSV, "lichess", nil, csvIDs(t, puzzlesOldCSV), "chess", ""},
			{"squares", jsonl, "jsonl", nil, []string{"sq-1", "sq-2", "sq-3", "sq-4"}, "math", "train"},
			{"gsm8k", verl, "verl", nil, []string{"openai/gsm8k-train-0", "openai/gsm8k-train-1", "openai/gsm8k-train-2"}, "math", "train"},
		}
		store := openStore(t, r.url)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				// Flags after the file, as people type them.
				args := append([]string{"data", "import", c.file, "--name", c.name, "--root", r.url}, c.flags...)
				whale(t, args...).mustCode(t, exitOK, fmt.Sprintf("imported %d tasks", len(c.ids)), "("+c.format+")", "datasets/"+c.name)

				m, tasks := datasetTasks(t, store, c.name)
				if !slices.Equal(taskIDs(tasks), c.ids) {
					t.Errorf("ids %v, want %v", taskIDs(tasks), c.ids)
				}
				if m.Rows("tasks") != int64(len(c.ids)) {
					t.Errorf("manifest says %d rows, want %d", m.Rows("tasks"), len(c.ids))
				}
				for _, task := range tasks {
					if task.Domain != c.domain || task.Split != c.split || task.Question == "" || len(task.Answers) == 0 {
						t.Errorf("task %+v: want domain %q, split %q, a question and answers", task, c.domain, c.split)
					}
				}
				if err := storage.Verify(ctx, store, m, true); err != nil {
					t.Error(err)
				}

				show := whale(t, "show", "datasets/"+c.name, "--root", r.url, "--rows", "100", "--width", "0")
				show.mustCode(t, exitOK, "dataset", "datasets/"+c.name, "table tasks", fmt.Sprintf("%d rows", len(c.ids)))
				for _, task := range tasks {
					if !strings.Contains(show.stdout, task.ID) || !strings.Contains(show.stdout, task.Question) {
						t.Errorf("show does not print task %s (%q):\n%s", task.ID, task.Question, show.stdout)
					}
				}

				before := r.keys(t)
				whale(t, args...).mustCode(t, exitOK, "nothing to do")
				// Same name, other file: refused, names the dataset.
				other := puzzlesCSV
				if c.file == puzzlesCSV {
					other = puzzlesOldCSV
				}
				whale(t, "data", "import", "--root", r.url, "--name", c.name, other).mustCode(t, exitConflict, "datasets/"+c.name)
				if after := r.keys(t); !slices.Equal(before, after) {
					t.Errorf("a no-op or refused import changed the bucket:\n%v\n→\n%v", before, after)
				}
			})
		}

		// The run function, with the name taken from the file.
		cubes := writeFile(t, "Cubes_Train.v2.jsonl", jsonlTasks(2, func(i int) string { return fmt.Sprintf("cube-%d", i) }))
		var out bytes.Buffer
		if err := runImport(ctx, importOptions{Root: r.url, File: cubes, Domain: "math"}, &out); err != nil {
			t.Fatal(err)
		}
		if _, tasks := datasetTasks(t, store, "cubes-train"); len(tasks) != 2 || !strings.Contains(out.String(), "imported 2 tasks") {
			t.Errorf("runImport printed %q and wrote %d tasks", out.String(), len(tasks))
		}

		ls := whale(t, "ls", "--root", r.url)
		ls.mustCode(t, exitOK, "(no runs)")
		for _, c := range cases {
			if !strings.Contains(ls.stdout, "datasets/"+c.name+" ") {
				t.Errorf("ls does not list dataset %s:\n%s", c.name, ls.stdout)
			}
		}
	})
}

// Bad input stops an import with one error naming the place, and nothing
// reaches the bucket: the part spools locally until the import is whole.
func TestImportBadInput(t *testing.T) {
	jsonlWith := func(n int, line map[int]string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if l, ok := line[i]; ok {
				b.WriteString(l + "\n")
				continue
			}
			fmt.Fprintf(&b, `{"id": "t%d", "question": "q%d", "answers": ["a"], "domain": "math"}`+"\n", i, i)
		}
		return b.String()
	}
	puzzles, err := os.ReadFile(puzzlesCSV)
	if err != nil {
		t.Fatal(err)
	}
	wrongHeader := strings.Replace(string(puzzles), "FEN,Moves,", "FEN,Move,", 1)
	badFEN := strings.Replace(string(puzzles), "r5k1/5ppp/8/8/8/8/5PPP/3R2K1", "r5k1/5ppp/8/8/8/8/5PPP", 1)
	gt := "5"

	type badCase struct {
		name  string
		file  string
		flags []string
		wants []string
	}
	cases := func(t *testing.T) []badCase {
		broken := writeFile(t, "broken.jsonl", jsonlWith(40, map[int]string{37: `{"id": "t37", "question": "q", "answers": ["a"],`}))
		dup := writeFile(t, "dup.jsonl", jsonlWith(6, map[int]string{5: `{"id": "t2", "question": "again", "answers": ["a"], "domain": "math"}`}))
		noDomain := writeFile(t, "nodomain.jsonl", jsonlWith(3, map[int]string{3: `{"id": "t3", "question": "q", "answers": ["a"]}`}))
		header := writeFile(t, "header.csv", wrongHeader)
		notLichess := writeFile(t, "qa.csv", "id,question,answer\n1,q,a\n")
		fen := writeFile(t, "fen.csv", badFEN)
		missing := writeVerl(t, "missing.parquet", []string{`{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "q"}]}`}, "reward_model")
		nullRM := writeVerl(t, "nullrm.parquet", []string{verlRow(0, &gt), verlRow(1, &gt), verlRow(2, nil)})
		empty := writeFile(t, "empty.jsonl", "\n\n")
		return []badCase{
			{"jsonl broken line 37", broken, nil, []string{broken + ":37", "invalid JSON"}},
			{"jsonl duplicate id", dup, nil, []string{dup + ":5", "duplicate", `"t2"`}},
			{"jsonl no domain", noDomain, nil, []string{noDomain + ":3", "domain"}},
			{"csv wrong header", header, nil, []string{header + ":1", "column 3", `"Moves"`}},
			{"csv not lichess", notLichess, nil, []string{notLichess, "first line", "PuzzleId,FEN,Moves"}},
			{"csv not lichess, format given", notLichess, []string{"--format", "lichess"}, []string{notLichess + ":1", "header"}},
			{"csv bad FEN", fen, nil, []string{fen + ":4", "FEN"}},
			{"parquet missing column", missing, nil, []string{missing, `"reward_model"`}},
			{"parquet null reward_model", nullRM, nil, []string{nullRM, "row 2", "reward_model"}},
			{"no tasks", empty, nil, []string{empty, "no tasks"}},
			{"no such file", empty + ".missing.jsonl", nil, []string{empty + ".missing.jsonl"}},
			{"unknown format", empty, []string{"--format", "xml"}, []string{"--format", "xml"}},
			{"bad name", empty, []string{"--name", "Bad_Name"}, []string{"--name", "Bad_Name"}},
			{"lichess as math", puzzlesCSV, []string{"--domain", "math"}, []string{puzzlesCSV, "chess"}},
		}
	}
	forEachRoot(t, func(t *testing.T, r testRoot) {
		for _, c := range cases(t) {
			t.Run(c.name, func(t *testing.T) {
				args := append([]string{"data", "import", "--root", r.url, "--name", "bad"}, c.flags...)
				res := whale(t, append(args, c.file)...)
				res.mustCode(t, exitUsage, c.wants...)
				if res.stdout != "" {
					t.Errorf("stdout: %q", res.stdout)
				}
				if keys := r.keys(t); len(keys) != 0 {
					t.Errorf("a failed import left %v in the bucket", keys)
				}
			})
		}
	})
}

// The spool is where a failed import's rows go; it must not outlive the
// import either.
func TestImportBadInputLeavesNoSpool(t *testing.T) {
	broken := writeFile(t, "broken.jsonl", jsonlTasks(36, func(i int) string { return fmt.Sprintf("t%d", i) })+"{\n")
	root := "file://" + t.TempDir()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	whale(t, "data", "import", "--root", root, broken).mustCode(t, exitUsage, broken+":37")
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) != 0 {
		t.Errorf("the import left %v in %s", names, tmp)
	}
}

// One damaged dataset manifest does not hide the others from ls: it is
// listed with its error.
func TestLsListsADamagedDatasetWithItsError(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + dir
	whale(t, "data", "import", "--root", root, "--name", "good", puzzlesCSV).mustCode(t, exitOK, "datasets/good")
	whale(t, "data", "import", "--root", root, "--name", "bad", puzzlesCSV).mustCode(t, exitOK, "datasets/bad")
	if err := os.WriteFile(filepath.Join(dir, "datasets", "bad", "_MANIFEST.json"), []byte("{broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := whale(t, "ls", "--root", root)
	ls.mustCode(t, exitOK, "datasets/good ", "datasets/bad", "datasets/bad/_MANIFEST.json")
}
