package demo

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

// Splits of the problem space. Every problem belongs to exactly one, by a
// hash of its operands, so that held-out tasks are never pretraining data.
const (
	SplitTrain  = "train"
	SplitSearch = "search"
	SplitTest   = "test"
)

// Problem is one arithmetic question: A Op B with single digits A and B,
// Op "+", "-" or "*", and A ≥ B for "-" so that the answer is never
// negative.
type Problem struct {
	A, B int
	Op   byte
}

// Question is the task text the model sees.
func (p Problem) Question() string { return fmt.Sprintf("What is %d %c %d?", p.A, p.Op, p.B) }

// Answer is the unique correct answer.
func (p Problem) Answer() int {
	switch p.Op {
	case '-':
		return p.A - p.B
	case '*':
		return p.A * p.B
	}
	return p.A + p.B
}

// Split is the split the problem belongs to: 2 in 10 problems are test, 2
// in 10 search (D_harness), the rest train.
func (p Problem) Split() string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d%c%d", p.A, p.Op, p.B)
	switch h.Sum32() % 10 {
	case 0, 1:
		return SplitTest
	case 2, 3:
		return SplitSearch
	}
	return SplitTrain
}

// allProblems is the whole space in a fixed order: 100 sums, 55
// differences and 100 products.
func allProblems() []Problem {
	ps := make([]Problem, 0, 255)
	for a := range 10 {
		for b := range 10 {
			ps = append(ps, Problem{A: a, B: b, Op: '+'})
			if a >= b {
				ps = append(ps, Problem{A: a, B: b, Op: '-'})
			}
			ps = append(ps, Problem{A: a, B: b, Op: '*'})
		}
	}
	return ps
}

// problemsOf lists the problems of split in the fixed order.
func problemsOf(split string) []Problem {
	var out []Problem
	for _, p := range allProblems() {
		if p.Split() == split {
			out = append(out, p)
		}
	}
	return out
}

// Tasks draws n distinct tasks of split (train, search or test) in an
// order fixed by seed; n larger than the split (151 train, 50 search, 54
// test) is an error.
func Tasks(seed uint64, n int, split string) ([]schemas.Task, error) {
	if split != SplitTrain && split != SplitSearch && split != SplitTest {
		return nil, fmt.Errorf("demo tasks: unknown split %q: want %s, %s or %s", split, SplitTrain, SplitSearch, SplitTest)
	}
	ps := problemsOf(split)
	if n < 0 || n > len(ps) {
		return nil, fmt.Errorf("demo tasks: %d %s tasks asked, the split has %d", n, split, len(ps))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7a5c))
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	out := make([]schemas.Task, n)
	for i, p := range ps[:n] {
		op := map[byte]string{'+': "add", '-': "sub", '*': "mul"}[p.Op]
		out[i] = schemas.Task{
			ID:       fmt.Sprintf("demo-%s-%d-%s-%d", split, p.A, op, p.B),
			Domain:   "demo",
			Split:    split,
			Question: p.Question(),
			Answers:  []string{strconv.Itoa(p.Answer())},
			Meta:     fmt.Sprintf(`{"a":%d,"b":%d,"op":%q}`, p.A, p.B, string(p.Op)),
		}
	}
	return out, nil
}

// SplitSize is how many problems split holds (0 for an unknown split).
func SplitSize(split string) int { return len(problemsOf(split)) }

// WriteDatasets writes DIR/demo-{train,search,test}.jsonl, each a whole
// split in seed's order, one task per line in the fields `whale data
// import` reads, and returns the paths.
func WriteDatasets(dir string, seed uint64) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo datasets: %w", err)
	}
	var paths []string
	for _, split := range []string{SplitTrain, SplitSearch, SplitTest} {
		tasks, err := Tasks(seed, SplitSize(split), split)
		if err != nil {
			return nil, err
		}
		var buf []byte
		for _, t := range tasks {
			line, err := importers.JSONLLine(t)
			if err != nil {
				return nil, fmt.Errorf("demo datasets: %w", err)
			}
			buf = append(buf, line...)
		}
		path := filepath.Join(dir, "demo-"+split+".jsonl")
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			return nil, fmt.Errorf("demo datasets: write %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}
