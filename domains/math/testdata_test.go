package mathdomain

import (
	"context"
	"encoding/json"
	"math/big"
	"os"
	"strconv"
	"testing"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

// solutions recompute the answers of testdata/problems.jsonl by brute
// force, so a wrong reference answer fails the test.
var solutions = map[string]func() int{
	"math-001": func() int {
		n := 0
		for k := 1; k <= 1000; k++ {
			if (k*k+k+41)%43 == 0 {
				n++
			}
		}
		return n
	},
	"math-002": func() int {
		return int(new(big.Int).Exp(big.NewInt(3), big.NewInt(2024), big.NewInt(1000)).Int64())
	},
	"math-003": func() int {
		// 1/a + 1/b = 1/12 forces a, b > 12 and a ≤ 12 + 144.
		n := 0
		for a := 13; a <= 12+144; a++ {
			if (12*a)%(a-12) == 0 {
				n++
			}
		}
		return n
	},
	"math-004": func() int {
		s := 0
		for d := 1; d <= 360; d++ {
			if 360%d == 0 {
				s += d
			}
		}
		return s
	},
	"math-005": func() int {
		for n := 3; ; n++ {
			if 180*(n-2) == 170*n {
				return n
			}
		}
	},
	"math-006": func() int {
		// x, y are the roots 2 and 5 of t^2 - 7t + 10.
		return 2*2*2 + 5*5*5
	},
	"math-007": func() int {
		n := 0
		for a := 1; a <= 8; a++ {
			for b := 1; b <= 8; b++ {
				for c := 1; c <= 8; c++ {
					if d := 8 - a - b - c; d >= 1 {
						n++
					}
				}
			}
		}
		return n
	},
	"math-008": func() int {
		a := 1
		for n := 1; n < 20; n++ {
			a += 2 * n
		}
		return a
	},
}

func TestProblemsImport(t *testing.T) {
	const path = "testdata/problems.jsonl"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tasks []schemas.Task
	err = importers.JSONL(context.Background(), f, path, importers.Options{}, func(task schemas.Task) error {
		tasks = append(tasks, task)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != len(solutions) {
		t.Fatalf("%d tasks, want %d", len(tasks), len(solutions))
	}
	seen := map[string]bool{}
	splits := map[string]int{}
	for _, task := range tasks {
		if seen[task.ID] {
			t.Errorf("duplicate id %s", task.ID)
		}
		seen[task.ID] = true
		splits[task.Split]++
		if task.Domain != "math" || task.Question == "" || len(task.Answers) != 1 {
			t.Errorf("%s: %+v", task.ID, task)
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal([]byte(task.Meta), &meta); err != nil || meta["source"] != "whale-handwritten" {
			t.Errorf("%s: meta %s (%v)", task.ID, task.Meta, err)
		}
		solve, ok := solutions[task.ID]
		if !ok {
			t.Errorf("%s: no solution to check it against", task.ID)
			continue
		}
		want := solve()
		if got, err := strconv.Atoi(task.Answers[0]); err != nil || got != want {
			t.Errorf("%s: answer %q, brute force gives %d", task.ID, task.Answers[0], want)
		}
		// The verifier accepts the answer in a box and rejects its neighbour.
		if r := Verify(`so the answer is $\boxed{`+task.Answers[0]+`}$`, task.Answers); !r.Correct {
			t.Errorf("%s: Verify rejects the reference: %+v", task.ID, r)
		}
		if r := Verify(`\boxed{`+strconv.Itoa(want+1)+`}`, task.Answers); r.Correct {
			t.Errorf("%s: Verify accepts %d", task.ID, want+1)
		}
	}
	if splits["train"] == 0 || splits["test"] == 0 {
		t.Errorf("splits %v, want both train and test", splits)
	}
}
