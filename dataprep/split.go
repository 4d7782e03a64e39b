package dataprep

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// Roles of an experiment's datasets, in the order Split fills them.
const (
	RoleTest   = "test"
	RoleSearch = "search"
	RoleTrain  = "train"
)

// SplitMethod names how Split assigns tasks; it is part of each output's
// config, so a change of method can never pass for the same split.
const SplitMethod = "sha256(whale-split-v1, seed, id): test, then search, then train"

// DefaultSearch is the paper's D_harness size.
const DefaultSearch = 256

// SplitOptions say what to split and into what.
type SplitOptions struct {
	// Source is the dataset to split.
	Source string
	// Train, Search and Test are how many tasks each output gets; 0 makes
	// no dataset for that role.
	Train, Search, Test int
	Seed                uint64
	// TrainName, SearchName and TestName name the outputs; "" means
	// Source-train, Source-search and Source-test.
	TrainName, SearchName, TestName string
	// WhaleVersion is recorded in the outputs' manifests.
	WhaleVersion string
}

// Output is one dataset Split made, or found made by an earlier Split
// with the same inputs.
type Output struct {
	Role    string
	Name    string
	Rows    int64
	Existed bool
}

// SplitResult is what Split did.
type SplitResult struct {
	Source string
	// Rows is the source's tasks; Left those in no output.
	Rows, Left int64
	Outputs    []Output
}

// splitConfig is what an output is a function of.
type splitConfig struct {
	Method string `json:"method"`
	Source string `json:"source"`
	// SourceDigest is the source's input digest: the digest of the file
	// it was imported from, with the import's options.
	SourceDigest string `json:"source_digest"`
	Role         string `json:"role"`
	Train        int    `json:"train"`
	Search       int    `json:"search"`
	Test         int    `json:"test"`
	// Seed is decimal text: JSON numbers lose uint64 precision.
	Seed string `json:"seed"`
}

// part is one role of a split.
type part struct {
	role, flag, name string
	n                int
	// last is the largest digest of the role's tasks.
	last digest
	w    *storage.DatasetWriter
	tw   *schemas.Writer[schemas.Task]
	pw   *storage.PartWriter
	out  Output
	doms map[string]int64
}

// Split splits dataset o.Source into up to three committed datasets (see
// the package's contract).
func Split(ctx context.Context, s *storage.Store, o SplitOptions) (*SplitResult, error) {
	parts := []*part{
		{role: RoleTest, flag: "--test", name: o.TestName, n: o.Test},
		{role: RoleSearch, flag: "--search", name: o.SearchName, n: o.Search},
		{role: RoleTrain, flag: "--train", name: o.TrainName, n: o.Train},
	}
	if err := storage.CheckDataset(o.Source); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	want := 0
	for _, p := range parts {
		if p.n < 0 {
			return nil, fmt.Errorf("%w: %s %d: a count of tasks cannot be negative (0 makes no %s dataset)", ErrBadInput, p.flag, p.n, p.role)
		}
		want += p.n
		if p.name == "" {
			p.name = o.Source + "-" + p.role
		}
		if p.n == 0 {
			continue
		}
		if err := storage.CheckDataset(p.name); err != nil {
			return nil, fmt.Errorf("%w: %s dataset: %w (name it with %s-name)", ErrBadInput, p.role, err, p.flag)
		}
		if p.name == o.Source {
			return nil, fmt.Errorf("%w: the %s dataset cannot be the source %s itself", ErrBadInput, p.role, o.Source)
		}
	}
	if want == 0 {
		return nil, fmt.Errorf("%w: --train, --search and --test are all 0: nothing to split", ErrBadInput)
	}
	parts = slices.DeleteFunc(parts, func(p *part) bool { return p.n == 0 })
	for i, p := range parts {
		for _, q := range parts[:i] {
			if p.name == q.name {
				return nil, fmt.Errorf("%w: the %s and %s datasets are both named %s", ErrBadInput, q.role, p.role, p.name)
			}
		}
	}
	src, err := readDataset(ctx, s, "split", o.Source)
	if err != nil {
		return nil, err
	}
	res := &SplitResult{Source: o.Source, Rows: rows(src)}
	if int64(want) > res.Rows {
		return nil, fmt.Errorf("%w: --train %d + --search %d + --test %d = %d tasks, but dataset %s has %d",
			ErrBadInput, o.Train, o.Search, o.Test, want, o.Source, res.Rows)
	}

	// Every output's name is checked before anything is read or written:
	// one taken by other data stops the split.
	var todo []*part
	for _, p := range parts {
		cfg := splitConfig{Method: SplitMethod, Source: o.Source, SourceDigest: src.InputDigest, Role: p.role,
			Train: o.Train, Search: o.Search, Test: o.Test, Seed: strconv.FormatUint(o.Seed, 10)}
		w, prev, err := storage.NewDatasetWriter(ctx, s, p.name, cfg, o.WhaleVersion)
		if err != nil {
			abort(todo)
			if errors.Is(err, storage.ErrDatasetDiffers) {
				return nil, fmt.Errorf("%s dataset: %w", p.role, err)
			}
			return nil, err
		}
		p.out = Output{Role: p.role, Name: p.name}
		if prev != nil {
			p.out.Rows, p.out.Existed = rows(prev), true
			continue
		}
		p.w = w
		todo = append(todo, p)
	}
	defer abort(todo)
	if len(todo) > 0 {
		if err := split(ctx, s, src, o.Seed, parts, todo); err != nil {
			return nil, err
		}
	}
	for _, p := range parts {
		res.Outputs = append(res.Outputs, p.out)
	}
	res.Left = res.Rows - int64(want)
	return res, nil
}

// abort drops the files of writers not committed.
func abort(ps []*part) {
	for _, p := range ps {
		if p.w != nil {
			p.w.Abort()
		}
	}
}

// splitKey is a task's rank: its digest of (seed, id).
func splitKey(seed []byte, id string) digest {
	return sum16([]byte("whale-split-v1\x00"), seed, []byte(id))
}

// split ranks the source's tasks (one pass keeping the smallest digests),
// then streams them again into the outputs of todo.
func split(ctx context.Context, s *storage.Store, src *storage.Manifest, seed uint64, parts, todo []*part) error {
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seed)
	k := 0
	for _, p := range parts {
		k += p.n
	}
	h := &maxHeap{}
	seen := int64(0)
	err := eachTask(ctx, s, src, func(t schemas.Task) error {
		seen++
		d := splitKey(sb[:], t.ID)
		switch {
		case h.Len() < k:
			heap.Push(h, d)
		case bytes.Compare(d[:], (*h)[0][:]) < 0:
			(*h)[0] = d
			heap.Fix(h, 0)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if h.Len() < k {
		return fmt.Errorf("%w: dataset %s holds %d tasks, not the %d its manifest records", ErrBadInput, src.Position, seen, rows(src))
	}
	keys := []digest(*h)
	slices.SortFunc(keys, func(a, b digest) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			return fmt.Errorf("%w: dataset %s has two tasks with the same id: split needs unique ids", ErrBadInput, src.Position)
		}
	}
	at := 0
	for _, p := range parts {
		at += p.n
		p.last = keys[at-1]
	}
	keys, *h = nil, nil

	for _, p := range todo {
		pw, err := p.w.Create(ctx, TasksTable, "parquet")
		if err != nil {
			return err
		}
		tw, err := schemas.NewWriter[schemas.Task](pw, schemas.Tasks, schemas.WriterOptions{})
		if err != nil {
			return err
		}
		p.pw, p.tw, p.doms = pw, tw, map[string]int64{}
	}
	err = eachTask(ctx, s, src, func(t schemas.Task) error {
		d := splitKey(sb[:], t.ID)
		for _, p := range parts {
			if bytes.Compare(d[:], p.last[:]) > 0 {
				continue
			}
			if p.tw == nil {
				return nil // an output that existed already
			}
			t.Split = p.role
			p.out.Rows++
			p.doms[t.Domain]++
			return p.tw.Write(t)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range todo {
		if p.out.Rows != int64(p.n) {
			return fmt.Errorf("dataset %s changed while it was split: %d %s tasks, want %d", src.Position, p.out.Rows, p.role, p.n)
		}
		if err := p.tw.Close(); err != nil {
			return err
		}
		if _, err := p.pw.Finish(p.tw.Rows()); err != nil {
			return err
		}
	}
	for _, p := range todo {
		if _, err := p.w.Commit(ctx, map[string]any{"tasks": p.out.Rows, "domains": p.doms, "splits": map[string]int64{p.role: p.out.Rows},
			"split_of": src.Position}); err != nil {
			return err
		}
		p.w = nil // committed: nothing to abort
	}
	return nil
}

// maxHeap keeps the largest digest on top, so the k smallest stay.
type maxHeap []digest

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return bytes.Compare(h[i][:], h[j][:]) > 0 }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(digest)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
