package spec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Inputs that used to be accepted, or to cost without bound, each get an
// error naming the field (or the line) and saying what is allowed.
func TestBadInputs(t *testing.T) {
	deep := minimal + "model:\n  extra:\n    x: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "\n"
	deepDashes := minimal + "slurm:\n  default:\n    extra:\n" + strings.Repeat("- ", 20000) + "x\n"
	deepBlock := minimal + "model:\n  extra:\n"
	for i := range 70 {
		deepBlock += strings.Repeat(" ", 4+i) + "k:\n"
	}
	tests := []struct {
		name, src string
		wants     []string
	}{
		{"group size 1e9", minimal + "rsft:\n  group_size: 1e9\n",
			[]string{"experiment.yaml:18:15: field rsft.group_size: must be at most 1024, got 1000000000 (allowed 1 to 1024)"}},
		{"group size in digits", minimal + "rsft:\n  group_size: 1000000000\n",
			[]string{"field rsft.group_size: must be at most 1024"}},
		{"eval.k 2^63-1", minimal + "eval:\n  k: 9223372036854775807\n",
			[]string{"experiment.yaml:18:6: field eval.k: must be at most 1024, got 9223372036854775807"}},
		{"samples", replaceLine(t, "  proposer: mutate", "  proposer: mutate\n  samples_per_candidate: 5000"),
			[]string{"field harness.samples_per_candidate: must be at most 1024"}},
		{"concurrency", replaceLine(t, "  name: m", "  name: m\n  concurrency: 100000"),
			[]string{"field model.concurrency: must be at most 4096"}},
		{"rollout concurrency", minimal + "rollout:\n  concurrency: 10000000\n",
			[]string{"field rollout.concurrency: must be at most 65536"}},
		{"shards", minimal + "rollout:\n  shards: 1000000\n",
			[]string{"field rollout.shards: must be at most 10000"}},
		{"batch size", minimal + "rsft:\n  batch_size: 100000000\n",
			[]string{"field rsft.batch_size: must be at most 1048576"}},
		{"budget rollouts", replaceLine(t, "  weight_steps: 10", "  weight_steps: 10\n  rollouts: 9223372036854775807"),
			[]string{"field budget.rollouts: must be at most 1099511627776"}},
		{"slurm gpus", minimal + "slurm: {default: {gpus: 100000}}\n",
			[]string{"field slurm.default.gpus: must be at most 1024"}},
		{"seed of 23 digits", minimal + "seed: 12345678901234567890123\n",
			[]string{"experiment.yaml:17:7: field seed: 12345678901234567890123 is out of range for a 64-bit integer: allowed -9223372036854775808 to 9223372036854775807"}},
		{"negative seed of 23 digits", minimal + "seed: -12345678901234567890123\n",
			[]string{"field seed: -12345678901234567890123 is out of range for a 64-bit integer"}},
		{"seed just past the range", minimal + "seed: 9223372036854775808\n",
			[]string{"field seed: 9223372036854775808 is out of range for a 64-bit integer"}},
		{"seed as a float beyond the range", minimal + "seed: 1e30\n",
			[]string{"field seed: 1e30 is out of range for a 64-bit integer"}},
		{"a fraction is no integer", minimal + "seed: 1.5\n",
			[]string{"field seed: expected integer, found float 1.5"}},
		{"a quoted number is a string", minimal + "seed: \"12\"\n",
			[]string{"field seed: expected integer, found string 12"}},
		{"20k nested flow lists", deep,
			[]string{"experiment.yaml:19:", "nests deeper than 64 levels"}},
		{"20k nested block lists", deepDashes,
			[]string{"experiment.yaml:20:", "nests deeper than 64 levels"}},
		{"70 nested block mappings", deepBlock,
			[]string{"nests deeper than 64 levels"}},
		{"a file too large", minimal + "description: \"" + strings.Repeat("x", MaxFileBytes) + "\"\n",
			[]string{"experiment.yaml: the file is more than the 131072 bytes an experiment file may have"}},
		{"many nests within the depth", replaceLine(t, "  name: m", "  name: m\n  extra:\n    x: ["+
			strings.Repeat(strings.Repeat("[", 30)+strings.Repeat("]", 30)+", ", 1500)+"]"),
			[]string{"experiment.yaml:10:", "too many nested values"}},
		{"a mapping of 5000 keys", replaceLine(t, "  name: m", "  name: m\n  extra:\n"+manyKeys(5000)),
			[]string{"experiment.yaml:1010:", "a mapping with more than 1000 keys"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Parse("experiment.yaml", []byte(tt.src))
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// The nesting bomb is refused from its tokens: some MB and
			// milliseconds, where the parser took 700 MB.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 || took > 5*time.Second {
				t.Errorf("took %v and %d MB", took, alloc>>20)
			}
		})
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "    k%d: 1\n", i)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Whole numbers written as floats are integers; the bounds apply to them.
func TestIntegerForms(t *testing.T) {
	e := mustParse(t, minimal+"rsft:\n  group_size: 1e1\n  batch_size: 64.0\n")
	if e.RSFT.GroupSize != 10 || e.RSFT.BatchSize != 64 {
		t.Errorf("group_size %d batch_size %d", e.RSFT.GroupSize, e.RSFT.BatchSize)
	}
	e = mustParse(t, minimal+"seed: -9223372036854775808\n")
	if e.Seed != -1<<63 {
		t.Errorf("seed %d", e.Seed)
	}
	// Nesting up to the bound is fine.
	ok := replaceLine(t, "  name: m", "  name: m\n  extra:\n    x: "+strings.Repeat("[", MaxDepth-3)+strings.Repeat("]", MaxDepth-3))
	mustParse(t, ok)
}

// The default rollout concurrency, model.concurrency × endpoints, stays
// within its bound.
func TestRolloutConcurrencyDefaultCapped(t *testing.T) {
	var eps []string
	for range 100 {
		eps = append(eps, `"http://127.0.0.1:8000/v1"`)
	}
	src := replaceLine(t, "  endpoints:", "  endpoints: ["+strings.Join(eps, ", ")+"]\n  concurrency: 4096")
	e := mustParse(t, src)
	if e.Rollout.Concurrency != MaxRolloutConcurrency {
		t.Errorf("rollout.concurrency %d", e.Rollout.Concurrency)
	}
}

// Load reads no more of a file than the bound.
func TestLoadLargeFile(t *testing.T) {
	p := writeTemp(t, t.TempDir(), "big.yaml", minimal+"description: \""+strings.Repeat("x", 4*MaxFileBytes)+"\"\n")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": the file is more than the 131072 bytes") {
		t.Errorf("Load: %v", err)
	}
}
