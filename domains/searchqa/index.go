package searchqa

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	index "github.com/blevesearch/bleve_index_api"
)

// IndexFormat and IndexFormatVersion name what an index directory holds.
// The version changes whenever the mapping, the analyzer or the layout
// does, so that an index built by another version is refused rather than
// searched with the wrong analyzer.
const (
	IndexFormat        = "whale-searchqa-bm25"
	IndexFormatVersion = 1
)

// infoFile sits next to bleve's files in an index directory and is written
// last: a directory without it is not an index.
const infoFile = "whale-index.json"

const contentsField = "contents"

// IndexInfo describes a built index; it is stored in the index directory
// and, in a bucket, in the index manifest.
type IndexInfo struct {
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	Docs          int64  `json:"docs"`
	// CorpusDigest is "sha256:<hex>" over the documents in corpus order
	// (see DigestDocs), so the same passages give the same digest whether
	// they came from JSONL or Parquet.
	CorpusDigest string    `json:"corpus_digest"`
	Analyzer     string    `json:"analyzer"`
	Scoring      string    `json:"scoring"`
	Created      time.Time `json:"created"`
}

// BuildOptions tune BuildIndex. The zero value is fine.
type BuildOptions struct {
	// BatchDocs and BatchBytes bound one indexing batch, which is what
	// BuildIndex holds in memory; 0 means 2,000 documents and 16 MiB of text.
	BatchDocs  int
	BatchBytes int
	// Progress, if set, is called after each batch with the documents read
	// so far.
	Progress func(docs int64)
	Logger   *slog.Logger
}

// BuildStats reports what BuildIndex did.
type BuildStats struct {
	Read         int64 // documents read from the corpus
	Docs         int64 // documents in the index
	Duplicates   int64 // Read - Docs: documents whose id an earlier one had; the last wins
	Bytes        int64 // bytes of contents read
	CorpusDigest string
	Elapsed      time.Duration
}

// indexMapping indexes only "contents", with bleve's English analyzer
// (Unicode tokenizer, possessive and lowercase filters, English stop words,
// Porter stemmer) and BM25 scoring, and stores it for retrieval. Term
// vectors and doc values are left out: nothing here highlights or sorts.
func indexMapping() *mapping.IndexMappingImpl {
	f := bleve.NewTextFieldMapping()
	f.Analyzer = en.AnalyzerName
	f.Store = true
	f.IncludeTermVectors = false
	f.IncludeInAll = false
	f.DocValues = false
	dm := bleve.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(contentsField, f)
	im := bleve.NewIndexMapping()
	im.DefaultMapping = dm
	im.DefaultAnalyzer = en.AnalyzerName
	im.ScoringModel = index.BM25Scoring
	im.IndexDynamic = false
	im.StoreDynamic = false
	im.DocValuesDynamic = false
	return im
}

// DigestDocs is the running corpus digest: sha256 over each document's id
// and contents, each preceded by its length as a uvarint.
type DigestDocs struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

// NewDigestDocs starts a corpus digest.
func NewDigestDocs() *DigestDocs { return &DigestDocs{h: sha256.New()} }

// Add appends one document.
func (d *DigestDocs) Add(doc Doc) {
	for _, s := range []string{doc.ID, doc.Contents} {
		n := binary.PutUvarint(d.buf[:], uint64(len(s)))
		d.h.Write(d.buf[:n])
		d.h.Write([]byte(s))
	}
}

// Sum returns "sha256:<hex>".
func (d *DigestDocs) Sum() string { return "sha256:" + hex.EncodeToString(d.h.Sum(nil)) }

// BuildIndex indexes corpus into a new directory dir, which must not
// exist. Documents are indexed in batches, so memory stays flat however
// large the corpus is. The index is built in a sibling temporary directory
// and renamed into place when complete: dir either holds a whole index or
// does not exist. A document whose id repeats an earlier one replaces it,
// and BuildStats counts it.
func BuildIndex(ctx context.Context, dir string, corpus Corpus, opts BuildOptions) (BuildStats, error) {
	start := time.Now()
	if opts.BatchDocs <= 0 {
		opts.BatchDocs = 2000
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var st BuildStats
	if _, err := os.Stat(dir); err == nil {
		return st, fmt.Errorf("build index %s: the directory exists; remove it or choose another", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("build index %s: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return st, fmt.Errorf("build index %s: %w", dir, err)
	}
	tmp := filepath.Join(parent, "."+filepath.Base(dir)+".building-"+randHex(6))
	defer os.RemoveAll(tmp)

	// Not "unsafe_batch": with it, Close drops segments the persister has
	// not written yet, and a small corpus ends up as an empty index.
	idx, err := bleve.New(tmp, indexMapping())
	if err != nil {
		return st, fmt.Errorf("build index %s: create: %w", dir, err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = idx.Close()
		}
	}()

	digest := NewDigestDocs()
	batch := idx.NewBatch()
	batchBytes := 0
	flush := func() error {
		if batch.Size() == 0 {
			return nil
		}
		if err := idx.Batch(batch); err != nil {
			return fmt.Errorf("index the batch ending at document %d: %w", st.Read, err)
		}
		batch.Reset()
		batchBytes = 0
		if opts.Progress != nil {
			opts.Progress(st.Read)
		}
		return ctx.Err()
	}
	err = corpus.Each(ctx, func(d Doc) error {
		if d.ID == "" {
			return fmt.Errorf("document %d has an empty id", st.Read)
		}
		digest.Add(d)
		st.Read++
		st.Bytes += int64(len(d.Contents))
		if err := batch.Index(d.ID, map[string]any{contentsField: d.Contents}); err != nil {
			return fmt.Errorf("document %d (id %q): %w", st.Read-1, d.ID, err)
		}
		batchBytes += len(d.Contents)
		if batch.Size() >= opts.BatchDocs || batchBytes >= opts.BatchBytes {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return st, fmt.Errorf("build index %s: %w", dir, err)
	}
	if st.Read == 0 {
		return st, fmt.Errorf("build index %s: the corpus has no documents", dir)
	}
	n, err := idx.DocCount()
	if err != nil {
		return st, fmt.Errorf("build index %s: count documents: %w", dir, err)
	}
	st.Docs = int64(n)
	st.Duplicates = st.Read - st.Docs
	st.CorpusDigest = digest.Sum()
	closed = true
	if err := idx.Close(); err != nil {
		return st, fmt.Errorf("build index %s: close: %w", dir, err)
	}
	if err := forceMerge(ctx, tmp, st.Docs); err != nil {
		return st, fmt.Errorf("build index %s: merge segments: %w", dir, err)
	}
	info := IndexInfo{Format: IndexFormat, FormatVersion: IndexFormatVersion, Docs: st.Docs, CorpusDigest: st.CorpusDigest,
		Analyzer: en.AnalyzerName, Scoring: index.BM25Scoring, Created: time.Now().UTC().Truncate(time.Second)}
	if err := writeInfo(tmp, info); err != nil {
		return st, fmt.Errorf("build index %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return st, fmt.Errorf("build index %s: move into place: %w", dir, err)
	}
	st.Elapsed = time.Since(start)
	if st.Duplicates > 0 {
		opts.Logger.Warn("corpus has repeated ids; the last document of each id was kept", "index", dir, "duplicates", st.Duplicates)
	}
	return st, nil
}

func writeInfo(dir string, info IndexInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, infoFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", infoFile, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", infoFile, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", infoFile, err)
	}
	return f.Close()
}

// ReadIndexInfo reads the description of the index in dir and checks that
// this build can search it.
func ReadIndexInfo(dir string) (IndexInfo, error) {
	var info IndexInfo
	b, err := os.ReadFile(filepath.Join(dir, infoFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("%s is not a whale search index (no %s); build one with BuildIndex (whale index build)", dir, infoFile)
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("read %s: %w", filepath.Join(dir, infoFile), err)
	}
	if err := checkInfo(info); err != nil {
		return info, fmt.Errorf("index %s: %w", dir, err)
	}
	return info, nil
}

func checkInfo(info IndexInfo) error {
	if info.Format != IndexFormat {
		return fmt.Errorf("format is %q, want %q", info.Format, IndexFormat)
	}
	if info.FormatVersion != IndexFormatVersion {
		return fmt.Errorf("format version is %d but this whale reads version %d; rebuild the index from its corpus", info.FormatVersion, IndexFormatVersion)
	}
	return nil
}

// Index is a BM25 index opened read-only. It implements Retriever and is
// safe for concurrent use; several processes may open one directory.
type Index struct {
	dir  string
	idx  bleve.Index
	info IndexInfo
}

// OpenIndex opens the index BuildIndex wrote in dir.
func OpenIndex(dir string) (*Index, error) {
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return nil, err
	}
	idx, err := bleve.OpenUsing(dir, map[string]interface{}{"read_only": true})
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", dir, err)
	}
	return &Index{dir: dir, idx: idx, info: info}, nil
}

// Info describes the index.
func (x *Index) Info() IndexInfo { return x.info }

// Close releases the index files.
func (x *Index) Close() error { return x.idx.Close() }

// Retrieve runs each query as a BM25 match query over the passages'
// contents, analysed like the corpus (so stop words and case do not
// matter, and no query syntax is interpreted).
func (x *Index) Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error) {
	if topk < 1 {
		return nil, fmt.Errorf("search index %s: topk is %d, want at least 1", x.dir, topk)
	}
	out := make([][]Passage, len(queries))
	for i, q := range queries {
		ps, err := x.search(ctx, q, topk)
		if err != nil {
			return nil, fmt.Errorf("search index %s: query %d: %w", x.dir, i, err)
		}
		out[i] = ps
	}
	return out, nil
}

func (x *Index) search(ctx context.Context, text string, topk int) ([]Passage, error) {
	q := bleve.NewMatchQuery(text)
	q.SetField(contentsField)
	q.Analyzer = en.AnalyzerName
	req := bleve.NewSearchRequestOptions(q, topk, 0, false)
	req.Fields = []string{contentsField}
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, err
	}
	ps := make([]Passage, 0, len(res.Hits))
	for _, h := range res.Hits {
		c, _ := h.Fields[contentsField].(string)
		ps = append(ps, Passage{ID: h.ID, Title: TitleOf(c), Contents: c, Score: h.Score})
	}
	return ps, nil
}

// forceMerge merges the index into one segment: the index is searched many
// times and never updated, and one segment answers faster than the dozens
// or thousands a large build leaves behind. One ForceMerge round merges at
// most ten segments per task, so it repeats while the count falls.
//
// It also checks, on the index as reopened from disk, that every document
// is there.
func forceMerge(ctx context.Context, dir string, docs int64) (err error) {
	idx, err := bleve.Open(dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := idx.Close(); err == nil {
			err = cerr
		}
	}()
	if n, err := idx.DocCount(); err != nil {
		return err
	} else if int64(n) != docs {
		return fmt.Errorf("the index holds %d documents after reopening, want %d", n, docs)
	}
	adv, err := idx.Advanced()
	if err != nil {
		return err
	}
	s, ok := adv.(*scorch.Scorch)
	if !ok {
		return nil
	}
	segments := func() uint64 {
		n, _ := s.StatsMap()["num_root_filesegments"].(uint64)
		m, _ := s.StatsMap()["num_root_memorysegments"].(uint64)
		return n + m
	}
	for prev := segments(); prev > 1; {
		if err := s.ForceMerge(ctx, nil); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		n := segments()
		if n >= prev {
			break
		}
		prev = n
	}
	// The merged-away segment files are deleted by scorch's persister once
	// it has persisted the merged snapshot and goes idle; closing before
	// then would leave them in the directory, and in every archive of it.
	// Waiting is best effort: stale files waste space but do no harm.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if zapFiles(dir) <= segments() {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func zapFiles(dir string) uint64 {
	ents, _ := os.ReadDir(filepath.Join(dir, "store"))
	var n uint64
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".zap" {
			n++
		}
	}
	return n
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
