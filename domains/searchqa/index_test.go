package searchqa

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2"
	"github.com/parquet-go/parquet-go"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

func TestTestdataQuestionsRetrieveTheirPassages(t *testing.T) {
	x := testIndex(t)
	docs := readCorpus(t)
	byID := map[string]Doc{}
	for _, d := range docs {
		byID[d.ID] = d
	}
	twoHop := 0
	for _, q := range readQuestions(t) {
		if len(q.Hops) > 1 {
			twoHop++
		}
		for _, h := range q.Hops {
			d, ok := byID[h.Doc]
			if !ok || TitleOf(d.Contents) != h.Title {
				t.Fatalf("%s: hop doc %s is not %q in the corpus", q.ID, h.Doc, h.Title)
			}
			res, err := x.Retrieve(context.Background(), []string{h.Query}, 3)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, len(res[0]))
			for i, p := range res[0] {
				ids[i] = p.ID + " " + p.Title
			}
			if !slices.ContainsFunc(res[0], func(p Passage) bool { return p.ID == h.Doc }) {
				t.Errorf("%s: query %q: want doc %s (%s) in the top 3, got %q", q.ID, h.Query, h.Doc, h.Title, ids)
			}
		}
		// The gold answer is written in the passage of the last hop, so a
		// model reading it could answer.
		last := byID[q.Hops[len(q.Hops)-1].Doc]
		if q.GoldenAnswers[0] != "yes" && !SubEM(last.Contents, q.GoldenAnswers) {
			t.Errorf("%s: no gold answer %q in passage %q", q.ID, q.GoldenAnswers, last.Contents)
		}
	}
	if twoHop == 0 {
		t.Error("questions.jsonl has no two-hop question")
	}
}

func TestTestdataQuestionsImport(t *testing.T) {
	f, err := os.Open("testdata/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	err = importers.JSONL(context.Background(), f, "questions.jsonl", importers.Options{}, func(task schemas.Task) error {
		n++
		if task.Domain != "searchqa" || task.Question == "" || len(task.Answers) == 0 || task.Split == "" {
			t.Errorf("task %+v is incomplete", task)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("imported %d questions, want at least 10", n)
	}
}

func TestIndexUsesBM25(t *testing.T) {
	x := testIndex(t)
	if x.Info().Scoring != "bm25" || x.Info().Analyzer != "en" {
		t.Fatalf("info = %+v", x.Info())
	}
	q := bleve.NewMatchQuery("river")
	q.SetField(contentsField)
	req := bleve.NewSearchRequest(q)
	req.Explain = true
	res, err := x.idx.Search(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) == 0 || !strings.Contains(res.Hits[0].Expl.String(), "bm25") {
		t.Fatalf("explanation does not name bm25: %v", res.Hits)
	}
}

func TestIndexRetrieve(t *testing.T) {
	x := testIndex(t)
	ctx := context.Background()
	res, err := x.Retrieve(ctx, []string{"Who were the architects of Canberra, in Australia? Walter Burley Griffin!", "the of and", "", "zzzunknownzzz", "AND OR NOT +title:(x"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 {
		t.Fatalf("got %d result lists", len(res))
	}
	if len(res[0]) != 2 || res[0][0].Title != "Canberra" || res[0][0].Score <= res[0][1].Score {
		t.Errorf("capital query: %+v", res[0])
	}
	if p := res[0][0]; !strings.HasPrefix(p.Contents, "\"Canberra\"\n") || !strings.HasPrefix(p.Text(), "Canberra is the capital") {
		t.Errorf("passage text: %+v", p)
	}
	for i := 1; i < 4; i++ {
		if len(res[i]) != 0 {
			t.Errorf("query %d: want no hits, got %d", i, len(res[i]))
		}
	}
	if _, err := x.Retrieve(ctx, []string{"x"}, 0); err == nil {
		t.Error("topk 0 accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := x.Retrieve(cctx, []string{"capital"}, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

func TestBuildIndexErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := BuildIndex(ctx, dir, genCorpus(3, 1), BuildOptions{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("existing dir: err = %v", err)
	}
	empty := jsonlCorpus(strings.NewReader("\n\n"), "empty.jsonl")
	if _, err := BuildIndex(ctx, filepath.Join(dir, "e"), empty, BuildOptions{}); err == nil || !strings.Contains(err.Error(), "no documents") {
		t.Errorf("empty corpus: err = %v", err)
	}
	bad := jsonlCorpus(strings.NewReader("{\"id\": \"1\", \"contents\": \"ok\"}\n{\"id\": 2}\n"), "bad.jsonl")
	_, err := BuildIndex(ctx, filepath.Join(dir, "b"), bad, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl:2") {
		t.Errorf("bad line: err = %v", err)
	}
	for _, name := range []string{"e", "b"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("failed build left %s behind", name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*building*")); len(left) > 0 {
		t.Errorf("temporary directories left: %q", left)
	}
	if _, err := OpenIndex(dir); err == nil || !strings.Contains(err.Error(), "not a whale search index") {
		t.Errorf("open non-index: err = %v", err)
	}
}

func TestBuildIndexDuplicatesAndStats(t *testing.T) {
	ctx := context.Background()
	in := `{"id": "a", "contents": "\"Old\"\nfirst version about zebras"}
{"id": 7, "contents": "\"Seven\"\nnumeric id about lions"}
{"contents": "\"No id\"\nrow without id about tigers"}
{"id": "a", "contents": "\"New\"\nsecond version about giraffes"}
{"id": "t", "title": "Split", "text": "title and text about otters"}
`
	dir := filepath.Join(t.TempDir(), "idx")
	st, err := BuildIndex(ctx, dir, jsonlCorpus(strings.NewReader(in), "dups.jsonl"), BuildOptions{BatchDocs: 2, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Read != 5 || st.Docs != 4 || st.Duplicates != 1 || st.Bytes == 0 || !strings.HasPrefix(st.CorpusDigest, "sha256:") {
		t.Errorf("stats = %+v", st)
	}
	x, err := OpenIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	res, err := x.Retrieve(ctx, []string{"zebras", "giraffes", "lions", "tigers", "otters"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "a New", "7 Seven", "2 No id", "t Split"}
	for i, w := range want {
		got := ""
		if len(res[i]) > 0 {
			got = res[i][0].ID + " " + res[i][0].Title
		}
		if got != w {
			t.Errorf("query %d: top hit %q, want %q", i, got, w)
		}
	}
}

func TestCorpusFormatsShareDigest(t *testing.T) {
	ctx := context.Background()
	docs := readCorpus(t)
	dir := t.TempDir()

	// JSONL, gzip-compressed.
	raw, err := os.ReadFile("testdata/corpus.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	gzPath := filepath.Join(dir, "corpus.jsonl.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	// Parquet with an integer id column, and one with title/text columns.
	type intRow struct {
		ID       int64  `parquet:"id"`
		Contents string `parquet:"contents"`
		Extra    string `parquet:"extra"`
	}
	type splitRow struct {
		ID    string `parquet:"id"`
		Title string `parquet:"title"`
		Text  string `parquet:"text"`
	}
	var ints []intRow
	var splits []splitRow
	for i, d := range docs {
		ints = append(ints, intRow{ID: int64(i), Contents: d.Contents, Extra: "x"})
		title, text, _ := strings.Cut(d.Contents, "\n")
		splits = append(splits, splitRow{ID: d.ID, Title: title, Text: text})
	}
	intPath := filepath.Join(dir, "ints.parquet")
	splitPath := filepath.Join(dir, "split.parquet")
	if err := parquet.WriteFile(intPath, ints); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(splitPath, splits); err != nil {
		t.Fatal(err)
	}

	want := NewDigestDocs()
	for _, d := range docs {
		want.Add(d)
	}
	for _, path := range []string{"testdata/corpus.jsonl", gzPath, intPath, splitPath} {
		got := NewDigestDocs()
		n := 0
		if err := FileCorpus(path).Each(ctx, func(d Doc) error {
			if d != docs[n] {
				t.Fatalf("%s: doc %d = %+v, want %+v", path, n, d, docs[n])
			}
			got.Add(d)
			n++
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if n != len(docs) || got.Sum() != want.Sum() {
			t.Errorf("%s: %d docs, digest %s; want %d, %s", path, n, got.Sum(), len(docs), want.Sum())
		}
	}
	if err := FileCorpus(filepath.Join(dir, "corpus.csv")).Each(ctx, func(Doc) error { return nil }); err == nil {
		t.Error("a .csv corpus was accepted")
	}
	type noContents struct {
		ID string `parquet:"id"`
	}
	badPath := filepath.Join(dir, "bad.parquet")
	if err := parquet.WriteFile(badPath, []noContents{{"1"}}); err != nil {
		t.Fatal(err)
	}
	if err := FileCorpus(badPath).Each(ctx, func(Doc) error { return nil }); err == nil || !strings.Contains(err.Error(), "no column \"contents\"") {
		t.Errorf("parquet without contents: err = %v", err)
	}
}
