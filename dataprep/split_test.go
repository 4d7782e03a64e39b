package dataprep

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/storage"
)

func TestSplit(t *testing.T) {
	forEachRoot(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		src := tasks("p", 1200)
		put(t, s, "pool", "pool.jsonl", src)
		// The same tasks in reverse row order: a split by row would differ.
		rev := slices.Clone(src)
		slices.Reverse(rev)
		put(t, s, "pool-rev", "pool-rev.jsonl", rev)
		all := ids(src)

		cases := []struct {
			name                string
			source              string
			train, search, test int
			seed                uint64
			names               [3]string // train, search, test; "" default
		}{
			{"paper shape", "pool", 800, 256, 100, 7, [3]string{}},
			{"reversed rows, same split", "pool-rev", 800, 256, 100, 7, [3]string{"r-train", "r-search", "r-test"}},
			{"more train keeps test and search", "pool", 840, 256, 100, 7, [3]string{"big-train", "big-search", "big-test"}},
			{"other seed", "pool", 800, 256, 100, 8, [3]string{"s8-train", "s8-search", "s8-test"}},
			{"no train", "pool", 0, 256, 100, 7, [3]string{"nt-train", "nt-search", "nt-test"}},
			{"every task", "pool", 844, 256, 100, 7, [3]string{"all-train", "all-search", "all-test"}},
		}
		got := map[string][3][]string{}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				o := SplitOptions{Source: c.source, Train: c.train, Search: c.search, Test: c.test, Seed: c.seed,
					TrainName: c.names[0], SearchName: c.names[1], TestName: c.names[2]}
				res, err := Split(ctx, s, o)
				if err != nil {
					t.Fatal(err)
				}
				wantTe, wantSe, wantTr := wantSplit(all, c.seed, c.test, c.search, c.train)
				var sets [3][]string
				for i, want := range []struct {
					role, name string
					ids        []string
				}{{RoleTrain, c.names[0], wantTr}, {RoleSearch, c.names[1], wantSe}, {RoleTest, c.names[2], wantTe}} {
					name := want.name
					if name == "" {
						name = c.source + "-" + want.role
					}
					idx := slices.IndexFunc(res.Outputs, func(o Output) bool { return o.Role == want.role })
					if len(want.ids) == 0 {
						if idx >= 0 {
							t.Errorf("a %s dataset for a count of 0: %+v", want.role, res.Outputs)
						}
						if _, err := storage.ReadDataset(ctx, s, name); !errors.Is(err, storage.ErrNotFound) {
							t.Errorf("dataset %s: %v, want none", name, err)
						}
						continue
					}
					if idx < 0 || res.Outputs[idx].Name != name || res.Outputs[idx].Rows != int64(len(want.ids)) || res.Outputs[idx].Existed {
						t.Fatalf("outputs %+v, want %s with %d rows", res.Outputs, name, len(want.ids))
					}
					ts := read(t, s, name)
					for _, x := range ts {
						if x.Split != want.role {
							t.Fatalf("task %s of %s has split %q, want %q", x.ID, name, x.Split, want.role)
						}
					}
					sets[i] = ids(ts)
					if !slices.Equal(sets[i], want.ids) {
						t.Errorf("%s holds %d tasks, not the %d the hash of (seed, id) picks", name, len(sets[i]), len(want.ids))
					}
				}
				if res.Rows != 1200 || res.Left != int64(1200-c.train-c.search-c.test) {
					t.Errorf("rows %d left %d", res.Rows, res.Left)
				}
				got[c.name] = sets
				// Again: nothing to do.
				again, err := Split(ctx, s, o)
				if err != nil {
					t.Fatal(err)
				}
				for _, out := range again.Outputs {
					if !out.Existed {
						t.Errorf("second split wrote %s again", out.Name)
					}
				}
			})
		}
		base := got["paper shape"]
		if r := got["reversed rows, same split"]; !slices.Equal(r[0], base[0]) || !slices.Equal(r[1], base[1]) || !slices.Equal(r[2], base[2]) {
			t.Error("the same tasks in another row order split differently")
		}
		if b := got["more train keeps test and search"]; !slices.Equal(b[1], base[1]) || !slices.Equal(b[2], base[2]) || len(b[0]) != 840 {
			t.Error("a larger --train moved tasks of test or search")
		}
		if o := got["other seed"]; slices.Equal(o[2], base[2]) {
			t.Error("another seed picked the same test set")
		}
	})
}

func TestSplitErrors(t *testing.T) {
	forEachRoot(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		put(t, s, "pool", "pool.jsonl", tasks("p", 50))
		// A dataset already under the test output's name, from other data.
		put(t, s, "taken-test", "other.jsonl", tasks("q", 5))
		long := strings.Repeat("a", 60)
		put(t, s, long, "long.jsonl", tasks("l", 5))
		cases := []struct {
			name   string
			o      SplitOptions
			is     error
			want   []string
			absent []string // datasets that must not have been written
		}{
			{"negative", SplitOptions{Source: "pool", Train: -1, Search: 5, Test: 5}, ErrBadInput,
				[]string{"--train -1", "cannot be negative"}, []string{"pool-search"}},
			{"too many", SplitOptions{Source: "pool", Train: 30, Search: 16, Test: 5}, ErrBadInput,
				[]string{"--train 30 + --search 16 + --test 5 = 51 tasks", "dataset pool has 50"}, []string{"pool-train"}},
			{"unknown dataset", SplitOptions{Source: "nope", Train: 1}, ErrBadInput,
				[]string{"no dataset nope in", "whale data import"}, nil},
			{"nothing asked", SplitOptions{Source: "pool"}, ErrBadInput, []string{"all 0"}, nil},
			{"output taken by other data", SplitOptions{Source: "pool", Train: 10, Search: 5, Test: 5, TestName: "taken-test"},
				storage.ErrDatasetDiffers, []string{"test dataset", "taken-test", "other data"}, []string{"pool-train", "pool-search"}},
			{"default name too long", SplitOptions{Source: long, Train: 1}, ErrBadInput,
				[]string{"train dataset", "invalid dataset name", "--train-name"}, nil},
			{"two outputs, one name", SplitOptions{Source: "pool", Train: 1, Test: 1, TrainName: "x", TestName: "x"}, ErrBadInput,
				[]string{"test and train datasets are both named x"}, []string{"x"}},
			{"output is the source", SplitOptions{Source: "pool", Test: 1, TestName: "pool"}, ErrBadInput,
				[]string{"cannot be the source pool"}, nil},
			{"bad source name", SplitOptions{Source: "Pool!", Test: 1}, ErrBadInput, []string{"invalid dataset name"}, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := Split(ctx, s, c.o)
				if err == nil || !errors.Is(err, c.is) {
					t.Fatalf("err = %v, want %v", err, c.is)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				for _, name := range c.absent {
					if _, err := storage.ReadDataset(ctx, s, name); !errors.Is(err, storage.ErrNotFound) {
						t.Errorf("dataset %s was written: %v", name, err)
					}
				}
			})
		}
	})
}
