package searchqa

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// genCorpus yields n passages of about 100 words drawn from a Zipf-like
// vocabulary, shaped like wiki-18 passages (a title line, then text).
func genCorpus(n int, seed uint64) Corpus {
	return CorpusFunc(func(ctx context.Context, fn func(Doc) error) error {
		r := rand.New(rand.NewPCG(seed, 1))
		z := rand.NewZipf(r, 1.1, 1, uint64(len(benchVocab)-1))
		var b strings.Builder
		for i := range n {
			b.Reset()
			fmt.Fprintf(&b, "\"%s %s\"\n", benchVocab[z.Uint64()], benchVocab[z.Uint64()])
			for w := range 100 {
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(benchVocab[z.Uint64()])
			}
			if err := fn(Doc{ID: fmt.Sprint(i), Contents: b.String()}); err != nil {
				return err
			}
		}
		return nil
	})
}

var benchVocab = func() []string {
	syll := []string{"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qua", "bri", "dol", "fen", "gar", "hul"}
	r := rand.New(rand.NewPCG(7, 7))
	v := make([]string, 20000)
	for i := range v {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteString(syll[r.IntN(len(syll))])
		}
		v[i] = fmt.Sprintf("%s%d", b.String(), i)
	}
	return v
}()

func BenchmarkBuildIndex10k(b *testing.B) {
	ctx := context.Background()
	const n = 10000
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(b.TempDir(), "idx")
		st, err := BuildIndex(ctx, dir, genCorpus(n, 1), BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if st.Docs != n {
			b.Fatalf("indexed %d docs, want %d", st.Docs, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "docs/s")
}

func BenchmarkRetrieve(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "idx")
	if _, err := BuildIndex(ctx, dir, genCorpus(10000, 1), BuildOptions{}); err != nil {
		b.Fatal(err)
	}
	x, err := OpenIndex(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	r := rand.New(rand.NewPCG(3, 3))
	queries := make([]string, 256)
	for i := range queries {
		queries[i] = benchVocab[r.IntN(2000)] + " " + benchVocab[r.IntN(200)] + " " + benchVocab[r.IntN(20000)]
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res, err := x.Retrieve(ctx, queries[i%len(queries):i%len(queries)+1], 3)
		if err != nil {
			b.Fatal(err)
		}
		if len(res[0]) == 0 {
			b.Fatalf("query %q found nothing", queries[i%len(queries)])
		}
	}
}

func BenchmarkClientServerRoundTrip(b *testing.B) {
	x := testIndex(b)
	srv := httptest.NewServer(NewServerWithOptions(x, ServerOptions{Logger: discardLogger()}))
	defer srv.Close()
	c, err := NewClient(srv.URL, ClientOptions{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Retrieve(ctx, []string{"longest river in Africa"}, 3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	resp := strings.Repeat("<think>reasoning about rivers and lakes</think>\n", 20) + "<answer>The Nile River</answer>"
	golds := []string{"Nile", "the Nile River"}
	for b.Loop() {
		if r := Verify(resp, golds); !r.EM {
			b.Fatal("no match")
		}
	}
}
