package searchdemo

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/models/local"
)

// TestWorld: the world is fixed, every entity is in one split, names are
// unique, and every task's answer is stated by exactly one passage.
func TestWorld(t *testing.T) {
	w := NewWorld()
	if len(w.Entities) != trainEntities+searchEntities+testEntities {
		t.Fatalf("%d entities", len(w.Entities))
	}
	if w2 := NewWorld(); w2.Entities[len(w2.Entities)-1] != w.Entities[len(w.Entities)-1] {
		t.Error("NewWorld is not the same on every call")
	}
	seen := map[string]bool{}
	for _, e := range w.Entities {
		for _, n := range []string{e.Name, e.Values[0]} {
			if seen[n] {
				t.Errorf("name %s is used twice", n)
			}
			seen[n] = true
		}
	}
	passages := map[string]string{}
	for _, d := range w.Corpus() {
		passages[d.ID] = d.Contents
	}
	counts := map[string]int{}
	for _, split := range []string{SplitTrain, SplitSearch, SplitTest} {
		ts, err := w.Tasks(split)
		if err != nil {
			t.Fatal(err)
		}
		counts[split] = len(ts)
		for _, task := range ts {
			var meta struct{ Entity, Relation string }
			if err := json.Unmarshal([]byte(task.Meta), &meta); err != nil {
				t.Fatal(err)
			}
			p := passages[strings.ToLower(meta.Entity)+"-"+meta.Relation]
			if !strings.Contains(p, task.Answers[0]) || !strings.Contains(task.Question, meta.Entity) || task.Domain != "searchqa" {
				t.Errorf("task %s (%q, %v): passage %q", task.ID, task.Question, task.Answers, p)
			}
		}
	}
	if counts[SplitTrain] != 360 || counts[SplitSearch] != 60 || counts[SplitTest] != 60 {
		t.Errorf("splits %v", counts)
	}
	if _, err := w.Tasks("dev"); err == nil {
		t.Error("an unknown split was accepted")
	}
}

// TestRanking: in an index built from the corpus, a search for a name
// finds its three passages with distinct scores, so TOPK=1 shows the
// same passage in every build, and each relation comes first for about a
// third of the entities.
func TestRanking(t *testing.T) {
	w := NewWorld()
	dir := t.TempDir()
	_, corpus, err := w.WriteFiles(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := searchqa.BuildIndex(ctx, filepath.Join(dir, "index"), searchqa.FileCorpus(corpus), searchqa.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	idx, err := searchqa.OpenIndex(filepath.Join(dir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	first := map[string]int{}
	for _, e := range w.Entities {
		res, err := idx.Retrieve(ctx, []string{e.Name}, 5)
		if err != nil {
			t.Fatal(err)
		}
		ps := res[0]
		if len(ps) != 3 {
			t.Fatalf("%s: %d passages", e.Name, len(ps))
		}
		for i := range 2 {
			if ps[i].Score <= ps[i+1].Score {
				t.Errorf("%s: scores %v %v tie or rise", e.Name, ps[i].Score, ps[i+1].Score)
			}
		}
		// The shortest sentence comes first.
		for r := range Relations {
			if e.Forms[r] == 0 && ps[0].ID != strings.ToLower(e.Name)+"-"+Relations[r].Name {
				t.Errorf("%s: first %s, want its %s", e.Name, ps[0].ID, Relations[r].Name)
			}
		}
		first[ps[0].ID[strings.LastIndexByte(ps[0].ID, '-')+1:]]++
	}
	for _, r := range Relations {
		if n := first[r.Name]; n < len(w.Entities)/5 {
			t.Errorf("relation %s first for %d of %d entities: %v", r.Name, n, len(w.Entities), first)
		}
	}
}

// TestConversation: pretraining never names an entity or town of the
// world, fits the context, and renders the tools as h0-local offers them.
func TestConversation(t *testing.T) {
	w := NewWorld()
	tools, err := Tools()
	if err != nil {
		t.Fatal(err)
	}
	text, err := local.ToolsText(tools)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `"name":"search"`) || !strings.Contains(text, `"query"`) {
		t.Errorf("tools turn %q", text)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	searched, answered := 0, 0
	for range 2000 {
		conv, _ := w.Conversation(rng)
		ids, _, err := local.EncodeTools(conv, tools, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > Config().Context {
			t.Errorf("%d tokens: %+v", len(ids), conv)
		}
		for _, m := range conv {
			text := m.Content
			for _, c := range m.ToolCalls {
				text += " " + c.Arguments
			}
			for _, word := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) }) {
				if w.Known(word) {
					t.Fatalf("pretraining names the world's %s: %q", word, text)
				}
			}
			if len(m.ToolCalls) > 0 {
				searched++
			}
		}
		last := conv[len(conv)-1]
		if last.Role == "assistant" && strings.HasPrefix(last.Content, "<answer>") {
			answered++
		}
	}
	if answered != 2000 || searched < 1600 || searched > 1900 {
		t.Errorf("of 2000 conversations %d end with an answer, %d search", answered, searched)
	}
	a, _ := w.Conversation(rand.New(rand.NewPCG(5, 6)))
	b, _ := w.Conversation(rand.New(rand.NewPCG(5, 6)))
	if ja, jb := mustJSON(t, a), mustJSON(t, b); ja != jb {
		t.Error("Conversation is not fixed by the seed")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriteFiles: the files hold every task once and the whole corpus,
// in the fields whale data import and whale index build read.
func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	tasks, corpus, err := NewWorld().WriteFiles(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{360, 60, 60} {
		data, err := os.ReadFile(tasks[i])
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n != want {
			t.Errorf("%s: %d lines, want %d", tasks[i], n, want)
		}
	}
	n := 0
	if err := searchqa.FileCorpus(corpus).Each(context.Background(), func(searchqa.Doc) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 480 {
		t.Errorf("corpus: %d passages, want 480", n)
	}
}
