package searchdemo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

// Splits of the world. Every entity belongs to exactly one, so a task of
// the search or test split asks about an entity no training task and no
// pretraining conversation ever named.
const (
	SplitTrain  = "train"
	SplitSearch = "search"
	SplitTest   = "test"
)

// worldSeed fixes the entities, their facts and the split. It is not a
// run's seed: every run searches the same corpus.
const worldSeed = 1

// How many entities each split holds; each entity has one fact of every
// relation, so a split has 3 tasks per entity.
const (
	trainEntities  = 120
	searchEntities = 20
	testEntities   = 20
)

// Relation is one kind of fact every entity has: the question that asks
// for it, and the sentences a passage states it with. No word of the
// question but the name is in the sentences (after stemming), so a search
// for the question finds the name's passages, not the fact's.
//
// Sentence i has 3+i terms after the index's English analyzer (stop
// words out), and each entity states its three facts with three
// different lengths (Entity.Forms is a permutation): BM25 then ranks an
// entity's passages by length with no ties, so the order of a search is
// the same in every index built from the corpus, and the fact ranked
// first is each relation's equally often.
type Relation struct {
	Name      string
	Question  string   // %s: the entity
	Sentences []string // %[1]s: the entity, %[2]s: the value
}

// Relations are the three facts of every entity, in a fixed order.
var Relations = []Relation{
	{Name: "home", Question: "Where is the home of %s?",
		Sentences: []string{"%s lives in %s.", "%s lives in the port of %s.", "%s lives by the old mill in %s."}},
	{Name: "pet", Question: "Which animal belongs to %s?",
		Sentences: []string{"%s keeps a %s.", "%s keeps a tame %s.", "%s keeps a tame old %s."}},
	{Name: "color", Question: "What is the favourite color of %s?",
		Sentences: []string{"%s wears %s.", "%s always wears %s.", "%s wears %s every day."}},
}

// Values the pet and color facts draw from; homes are invented names.
var (
	animals = []string{"heron", "goat", "stoat", "lynx", "crow", "toad", "mole", "wren", "hare", "newt", "moth", "seal"}
	colors  = []string{"red", "blue", "green", "white", "black", "grey", "brown", "yellow", "orange", "purple"}
)

var (
	onsets = []string{"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "tr", "st"}
	vowels = []string{"a", "e", "i", "o", "u"}
	codas  = []string{"", "", "n", "r", "l", "s", "k", "m"}
	towns  = []string{"ford", "holm", "mar", "vik", "wick", "dale", "burg", "stead"}
)

// personName is an invented two-syllable name ("Bravik", "Tolen").
func personName(rng *rand.Rand) string {
	s := onsets[rng.IntN(len(onsets))] + vowels[rng.IntN(len(vowels))] +
		onsets[rng.IntN(14)] + vowels[rng.IntN(len(vowels))] + codas[rng.IntN(len(codas))]
	return strings.ToUpper(s[:1]) + s[1:]
}

// townName is an invented place ("Dalholm", "Kivik").
func townName(rng *rand.Rand) string {
	s := onsets[rng.IntN(len(onsets))] + vowels[rng.IntN(len(vowels))] + codas[2+rng.IntN(len(codas)-2)] + towns[rng.IntN(len(towns))]
	return strings.ToUpper(s[:1]) + s[1:]
}

// Entity is one invented person with one fact per relation, each stated
// by one passage.
type Entity struct {
	Name   string
	Values [3]string // per Relations
	Forms  [3]int    // which sentence of each relation the passage uses: a permutation
	Split  string
}

// Passage is the sentence stating fact r of e.
func (e Entity) Passage(r int) string {
	return fmt.Sprintf(Relations[r].Sentences[e.Forms[r]], e.Name, e.Values[r])
}

// drawEntity draws an entity named name.
func drawEntity(rng *rand.Rand, name string) Entity {
	e := Entity{Name: name}
	e.Values = [3]string{townName(rng), animals[rng.IntN(len(animals))], colors[rng.IntN(len(colors))]}
	copy(e.Forms[:], rng.Perm(len(e.Forms)))
	return e
}

// World is the demo's invented world: the entities of every split.
type World struct {
	Entities []Entity
	names    map[string]bool // every entity and town name, for pretraining to avoid
}

// NewWorld builds the world; it is the same on every call.
func NewWorld() *World {
	rng := rand.New(rand.NewPCG(worldSeed, 0x5ea7c4))
	w := &World{names: map[string]bool{}}
	for _, split := range []struct {
		name string
		n    int
	}{{SplitTrain, trainEntities}, {SplitSearch, searchEntities}, {SplitTest, testEntities}} {
		for range split.n {
			name := personName(rng)
			for w.names[name] {
				name = personName(rng)
			}
			e := drawEntity(rng, name)
			for w.names[e.Values[0]] {
				e.Values[0] = townName(rng)
			}
			e.Split = split.name
			w.names[e.Name], w.names[e.Values[0]] = true, true
			w.Entities = append(w.Entities, e)
		}
	}
	return w
}

// Known reports whether name is a name of the world (an entity or a
// town): pretraining never uses one.
func (w *World) Known(name string) bool { return w.names[name] }

// Corpus is every passage of the world, one document per fact, in entity
// then relation order: id "<name>-<relation>", contents the name as the
// title line, then the sentence (Search-R1's layout).
func (w *World) Corpus() []searchqa.Doc {
	var docs []searchqa.Doc
	for _, e := range w.Entities {
		for r, rel := range Relations {
			docs = append(docs, searchqa.Doc{ID: strings.ToLower(e.Name) + "-" + rel.Name, Contents: e.Name + "\n" + e.Passage(r)})
		}
	}
	return docs
}

// Tasks are the questions of split, three per entity, in entity then
// relation order. Domain is searchqa: the demo runs the search-QA domain.
func (w *World) Tasks(split string) ([]schemas.Task, error) {
	if !slices.Contains([]string{SplitTrain, SplitSearch, SplitTest}, split) {
		return nil, fmt.Errorf("search demo tasks: unknown split %q: want %s, %s or %s", split, SplitTrain, SplitSearch, SplitTest)
	}
	var out []schemas.Task
	for _, e := range w.Entities {
		if e.Split != split {
			continue
		}
		for r, rel := range Relations {
			out = append(out, schemas.Task{
				ID:       fmt.Sprintf("searchdemo-%s-%s-%s", split, strings.ToLower(e.Name), rel.Name),
				Domain:   "searchqa",
				Split:    split,
				Question: fmt.Sprintf(rel.Question, e.Name),
				Answers:  []string{e.Values[r]},
				Meta:     fmt.Sprintf(`{"entity":%q,"relation":%q}`, e.Name, rel.Name),
			})
		}
	}
	return out, nil
}

// WriteFiles writes DIR/searchdemo-{train,search,test}.jsonl (tasks in
// the fields `whale data import` reads; the search file in an order fixed
// by seed, so that the first search_set_size tasks mix the entities) and
// DIR/searchdemo-corpus.jsonl (the passages `whale index build` reads),
// and returns the task paths and the corpus path.
func (w *World) WriteFiles(dir string, seed uint64) (tasks []string, corpus string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("search demo files: %w", err)
	}
	for _, split := range []string{SplitTrain, SplitSearch, SplitTest} {
		ts, err := w.Tasks(split)
		if err != nil {
			return nil, "", err
		}
		rng := rand.New(rand.NewPCG(seed, 0x7a5c))
		rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
		var buf []byte
		for _, t := range ts {
			line, err := importers.JSONLLine(t)
			if err != nil {
				return nil, "", fmt.Errorf("search demo files: %w", err)
			}
			buf = append(buf, line...)
		}
		path := filepath.Join(dir, "searchdemo-"+split+".jsonl")
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			return nil, "", fmt.Errorf("search demo files: %w", err)
		}
		tasks = append(tasks, path)
	}
	var buf []byte
	for _, d := range w.Corpus() {
		// The fields `whale index build` reads from JSONL.
		line, err := json.Marshal(map[string]string{"id": d.ID, "contents": d.Contents})
		if err != nil {
			return nil, "", fmt.Errorf("search demo corpus: %s: %w", d.ID, err)
		}
		buf = append(append(buf, line...), '\n')
	}
	corpus = filepath.Join(dir, "searchdemo-corpus.jsonl")
	if err := os.WriteFile(corpus, buf, 0o644); err != nil {
		return nil, "", fmt.Errorf("search demo corpus: %w", err)
	}
	return tasks, corpus, nil
}
