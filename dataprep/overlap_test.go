package dataprep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

func task(id, q string) schemas.Task {
	return schemas.Task{ID: id, Domain: "demo", Question: q, Answers: []string{"1"}, Meta: "{}"}
}

func TestCheckOverlap(t *testing.T) {
	forEachRoot(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		// train is the largest, so it is the one streamed; search and test
		// are held as digests.
		train := tasks("tr", 40)
		put(t, s, "train", "train", train)
		put(t, s, "search", "search", tasks("se", 10))
		put(t, s, "test", "test", tasks("te", 12))
		// Overlapping variants.
		put(t, s, "test-shares-id", "x", append(tasks("te", 3), task("tr-7", "A question of its own")))
		put(t, s, "test-shares-question", "y", append(tasks("te", 3), task("te-q", "  (TR) WHAT is 9 +\t2? ")))
		put(t, s, "search-shares-test", "z", append(tasks("se", 3), task("te-1", "Another question")))
		many := tasks("te", 2)
		for i := range 8 {
			many = append(many, task(fmt.Sprintf("tr-%d", 10+i), fmt.Sprintf("Unrelated %d", i)))
		}
		put(t, s, "test-shares-many", "w", many)

		named := func(train, search, test string) []Named {
			var out []Named
			for _, n := range []Named{{"data.train", train}, {"data.search", search}, {"data.test", test}} {
				if n.Dataset != "" {
					out = append(out, n)
				}
			}
			return out
		}
		cases := []struct {
			name    string
			sets    []Named
			missing []string
			ids     int
			qs      int
			want    []string // in the error
		}{
			{"disjoint", named("train", "search", "test"), nil, 0, 0, nil},
			{"train and search only", named("train", "search", ""), nil, 0, 0, nil},
			{"shared id", named("train", "search", "test-shares-id"), nil, 1, 0, []string{
				"1 shared task ids, 0 shared questions",
				`same id: data.test datasets/test-shares-id task "tr-7" ("A question of its own") and data.train datasets/train task "tr-7" ("(tr) What is 7 + 0?")`,
				"whale data split"}},
			{"shared question, case and spaces differ", named("train", "search", "test-shares-question"), nil, 0, 1, []string{
				`same question: data.test datasets/test-shares-question task "te-q" ("(TR) WHAT is 9 + 2?") and data.train datasets/train task "tr-9" ("(tr) What is 9 + 2?")`}},
			{"search and test share", named("train", "search-shares-test", "test"), nil, 1, 0, []string{
				`same id: data.search datasets/search-shares-test task "te-1"`, `data.test datasets/test task "te-1"`}},
			{"many: the first few", named("train", "search", "test-shares-many"), nil, 8, 0, []string{"8 shared task ids", "the first 5:"}},
			{"a dataset not imported", named("train", "search", "later"), []string{"later"}, 0, 0, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				missing, err := CheckOverlap(ctx, s, c.sets)
				var got []string
				for _, m := range missing {
					got = append(got, m.Dataset)
				}
				if strings.Join(got, ",") != strings.Join(c.missing, ",") {
					t.Errorf("missing %v, want %v", got, c.missing)
				}
				if c.ids+c.qs == 0 {
					if err != nil {
						t.Fatalf("err = %v, want none", err)
					}
					return
				}
				var oe *OverlapError
				if !errors.As(err, &oe) || !errors.Is(err, ErrBadInput) {
					t.Fatalf("err = %v, want an *OverlapError", err)
				}
				if oe.IDs != c.ids || oe.Questions != c.qs || len(oe.First) != min(MaxShown, c.ids+c.qs) {
					t.Errorf("%d ids, %d questions, %d shown; want %d, %d", oe.IDs, oe.Questions, len(oe.First), c.ids, c.qs)
				}
				for _, o := range oe.First {
					if o.A.ID == "" || o.B.ID == "" {
						t.Errorf("overlap %+v does not name both tasks", o)
					}
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not say %q:\n%s", w, err)
					}
				}
			})
		}

		_, err := CheckOverlap(ctx, s, named("train", "test", "test"))
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "data.search and data.test datasets/test name the same dataset") {
			t.Errorf("the same dataset twice: %v", err)
		}
	})
}

func TestNormalizeQuestion(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"What is 2+2?", "what is 2+2?"},
		{"  What\tis\n 2+2? ", "what is 2+2?"},
		{"ÉTÉ  Été", "été été"},
		{"", ""},
	} {
		if got := NormalizeQuestion(c.in); got != c.want {
			t.Errorf("NormalizeQuestion(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
