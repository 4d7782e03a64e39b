package dataprep

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// Named is one of an experiment's datasets.
type Named struct {
	Field   string // data.train, data.search or data.test
	Dataset string // its name in the root
}

func (n Named) String() string { return n.Field + " " + storage.DatasetDir(n.Dataset) }

// Overlap kinds.
const (
	SameID       = "id"
	SameQuestion = "question"
)

// Task names one task of a dataset in an Overlap.
type Task struct {
	Named
	ID       string
	Question string // its first characters
}

// Overlap is a task of one dataset that another dataset also has: the
// same id, or the same question.
type Overlap struct {
	Kind string
	A, B Task
}

// OverlapError says which datasets share tasks, with the first few
// shared tasks. It wraps ErrBadInput.
type OverlapError struct {
	// First are the first overlaps found (at most MaxShown).
	First []Overlap
	// IDs and Questions count every shared id and question.
	IDs, Questions int
}

// MaxShown is how many overlaps an OverlapError names.
const MaxShown = 5

func (e *OverlapError) Error() string {
	var b strings.Builder
	// One line, as every error whale prints.
	fmt.Fprintf(&b, "the experiment's datasets share tasks (%d shared task ids, %d shared questions), but train, search and test must be disjoint; the first %d:",
		e.IDs, e.Questions, len(e.First))
	for i, o := range e.First {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " same %s: %s task %q (%q) and %s task %q (%q)", o.Kind, o.A.Named, o.A.ID, o.A.Question, o.B.Named, o.B.ID, o.B.Question)
	}
	b.WriteString(". Split one dataset into disjoint ones with `whale data split`, or remove the shared tasks and import again")
	return b.String()
}

func (e *OverlapError) Unwrap() error { return ErrBadInput }

// CheckOverlap reads the datasets and returns an *OverlapError when two of
// them share a task id or a question (see NormalizeQuestion). Datasets not
// in the root are not checked; they are returned as missing. Two fields
// naming the same dataset is an overlap of every task.
func CheckOverlap(ctx context.Context, s *storage.Store, sets []Named) (missing []Named, err error) {
	for i, a := range sets {
		for _, b := range sets[:i] {
			if a.Dataset == b.Dataset {
				return nil, fmt.Errorf("%w: %s and %s name the same dataset: train, search and test must be disjoint (whale data split makes disjoint ones)",
					ErrBadInput, b.Field, a)
			}
		}
	}
	type held struct {
		Named
		m *storage.Manifest
	}
	var ds []held
	for _, n := range sets {
		m, err := storage.ReadDataset(ctx, s, n.Dataset)
		if err != nil {
			if isNotFound(err) {
				missing = append(missing, n)
				continue
			}
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		ds = append(ds, held{n, m})
	}
	if len(ds) < 2 {
		return missing, nil
	}
	// The largest dataset (train, usually) is streamed against the digests
	// of the others, which are all that is held.
	slices.SortStableFunc(ds, func(a, b held) int { return cmp.Compare(rows(a.m), rows(b.m)) })
	ids, questions := map[digest]uint8{}, map[digest]uint8{}
	e := &OverlapError{}
	// pending are the overlaps whose A side is known by digest only, to be
	// named by reading its dataset again.
	type pending struct {
		o   int // index into e.First
		in  int // index into ds
		key digest
	}
	var todo []pending
	found := func(kind string, key digest, mask uint8, j int, t schemas.Task) {
		for i := range ds[:j] {
			if mask&(1<<i) == 0 {
				continue
			}
			if kind == SameID {
				e.IDs++
			} else {
				e.Questions++
			}
			if len(e.First) < MaxShown {
				e.First = append(e.First, Overlap{Kind: kind, A: Task{Named: ds[i].Named},
					B: Task{Named: ds[j].Named, ID: t.ID, Question: prefix(t.Question)}})
				todo = append(todo, pending{len(e.First) - 1, i, key})
			}
		}
	}
	for j, d := range ds {
		last := j == len(ds)-1
		err := eachTask(ctx, s, d.m, func(t schemas.Task) error {
			for _, kv := range []struct {
				kind string
				key  digest
				m    map[digest]uint8
			}{{SameID, idKey(t.ID), ids}, {SameQuestion, questionKey(t.Question), questions}} {
				mask := kv.m[kv.key]
				if other := mask &^ (1 << j); other != 0 {
					found(kv.kind, kv.key, other, j, t)
				}
				if !last {
					kv.m[kv.key] = mask | 1<<j
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Named, err)
		}
	}
	if e.IDs+e.Questions == 0 {
		return missing, nil
	}
	clear(ids)
	clear(questions)
	// Name the other side of each overlap shown.
	for i := range ds {
		if !slices.ContainsFunc(todo, func(p pending) bool { return p.in == i }) {
			continue
		}
		err := eachTask(ctx, s, ds[i].m, func(t schemas.Task) error {
			id, q := idKey(t.ID), questionKey(t.Question)
			for _, p := range todo {
				o := &e.First[p.o]
				if p.in != i || o.A.ID != "" || (o.Kind == SameID && p.key != id) || (o.Kind == SameQuestion && p.key != q) {
					continue
				}
				o.A.ID, o.A.Question = t.ID, prefix(t.Question)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ds[i].Named, err)
		}
	}
	return missing, e
}

func idKey(id string) digest { return sum16([]byte("id\x00"), []byte(id)) }

func questionKey(q string) digest {
	return sum16([]byte("question\x00"), []byte(NormalizeQuestion(q)))
}
