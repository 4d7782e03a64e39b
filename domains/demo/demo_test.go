package demo

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

func TestTasks(t *testing.T) {
	seen := map[string]string{}
	total := 0
	for _, split := range []string{SplitTrain, SplitSearch, SplitTest} {
		n := SplitSize(split)
		total += n
		a, err := Tasks(5, n, split)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Tasks(5, n, split)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: Tasks is not deterministic", split)
		}
		c, _ := Tasks(6, n, split)
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: seeds 5 and 6 give the same order", split)
		}
		for _, task := range a {
			if prev, ok := seen[task.Question]; ok {
				t.Errorf("%q in %s and %s", task.Question, prev, split)
			}
			seen[task.Question] = split
			if got := Grade(task.Answers[0], task.Answers); !got.Correct {
				t.Errorf("%s: reference %q does not grade as correct", task.ID, task.Answers[0])
			}
			if task.Split != split || task.Domain != "demo" {
				t.Errorf("%s: split %q domain %q", task.ID, task.Split, task.Domain)
			}
		}
	}
	if total != len(allProblems()) || len(allProblems()) != 255 {
		t.Errorf("splits hold %d of %d problems, want all 255", total, len(allProblems()))
	}
	for _, tc := range []struct {
		n     int
		split string
	}{{-1, SplitTest}, {SplitSize(SplitTest) + 1, SplitTest}, {1, "dev"}} {
		if _, err := Tasks(1, tc.n, tc.split); err == nil {
			t.Errorf("Tasks(%d, %q) did not fail", tc.n, tc.split)
		}
	}
}

func TestWriteDatasets(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteDatasets(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, split := range []string{SplitTrain, SplitSearch, SplitTest} {
		if paths[i] != filepath.Join(dir, "demo-"+split+".jsonl") {
			t.Errorf("path %d = %s", i, paths[i])
		}
		data, err := os.ReadFile(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(data), "\n"); got != SplitSize(split) {
			t.Errorf("%s: %d lines, want %d", split, got, SplitSize(split))
		}
	}
}

func TestGrade(t *testing.T) {
	for _, tc := range []struct {
		answer string
		refs   []string
		want   bool
	}{
		{"56", []string{"56"}, true},
		{" 56\n", []string{"56"}, true},
		{"056", []string{"56"}, true},
		{"+56", []string{"56"}, true},
		{"57", []string{"56"}, false},
		{"56.", []string{"56"}, false},
		{"fifty-six", []string{"56"}, false},
		{"", []string{"0"}, false},
		{"0", []string{"0"}, true},
		{"99999999999999999999", []string{"1"}, false},
	} {
		if got := Grade(tc.answer, tc.refs); got.Correct != tc.want || (got.Reward == 1) != tc.want {
			t.Errorf("Grade(%q, %q) = %+v, want correct %v", tc.answer, tc.refs, got, tc.want)
		}
	}
}

func FuzzGrade(f *testing.F) {
	for _, s := range []string{"56", " 7 ", "-3", "1e3", "<answer>4</answer>", "٣"} {
		f.Add(s, "4")
	}
	f.Fuzz(func(t *testing.T, answer, ref string) {
		out := Grade(answer, []string{ref})
		if out.Correct != (out.Reward == 1) || (out.Reward != 0 && out.Reward != 1) {
			t.Fatalf("Grade(%q, %q) = %+v", answer, ref, out)
		}
		if out.Correct && Grade(ref, []string{answer}).Correct != true {
			t.Fatalf("Grade(%q, %q) is not symmetric", answer, ref)
		}
	})
}

func TestEnv(t *testing.T) {
	ctx := context.Background()
	d := NewDomain()
	task := schemas.Task{ID: "t", Question: "What is 7 * 8?", Answers: []string{"56"}}
	if _, err := d.NewEnv(ctx, schemas.Task{ID: "x", Answers: []string{"1"}}, nil); err == nil {
		t.Error("empty question accepted")
	}
	if _, err := d.NewEnv(ctx, schemas.Task{ID: "x", Question: "q"}, nil); err == nil {
		t.Error("task without answers accepted")
	}
	for _, tc := range []struct {
		action  harness.Action
		done    bool
		reward  float64
		illegal bool
		err     bool
	}{
		{harness.Action{Kind: "answer", Answer: "56"}, true, 1, false, false},
		{harness.Action{Kind: "answer", Answer: "54"}, true, 0, false, false},
		{harness.Action{Kind: "tool", Tool: "python"}, false, 0, true, false},
		{harness.Action{Kind: "move", Move: "e2e4"}, false, 0, true, false},
		{harness.Action{Kind: "dance"}, false, 0, false, true},
	} {
		env, err := d.NewEnv(ctx, task, nil)
		if err != nil {
			t.Fatal(err)
		}
		obs, _ := env.Reset(ctx)
		if obs["question"] != task.Question {
			t.Errorf("Reset = %v", obs)
		}
		st, err := env.Step(ctx, tc.action)
		if (err != nil) != tc.err || st.Done != tc.done || st.Outcome.Reward != tc.reward || (st.Illegal != "") != tc.illegal {
			t.Errorf("Step(%+v) = %+v, %v", tc.action, st, err)
		}
	}
}

// TestH0 checks h0's hooks: the cue and the parsers each constant turns on.
func TestH0(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, value string
		reply       string
		kind, ans   string
		cue         bool
	}{
		{"", "", "<answer>56</answer>", "answer", "56", false},
		{"", "", "The result is 56.", "invalid", "", false},
		{"LENIENT_PARSE", "True", "The result is 56.", "answer", "56", false},
		{"LENIENT_PARSE", "True", "7 * 8 = 56. <answer>55</answer>", "answer", "55", false},
		{"LENIENT_PARSE", "True", "no idea", "invalid", "", false},
		{"ANSWER_CUE", "True", "The result is 56.", "invalid", "", true},
	} {
		h := variant(t, tc.name, tc.value)
		obs, err := h.Call(ctx, "format_observation", map[string]any{"question": "What is 7 * 8?"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(obs.(string), AnswerCue); got != tc.cue {
			t.Errorf("%s=%s: observation %q, cue %v", tc.name, tc.value, obs, got)
		}
		a, err := h.Call(ctx, "parse_action", tc.reply, map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		m := a.(map[string]any)
		if m["kind"] != tc.kind || (tc.ans != "" && m["answer"] != tc.ans) {
			t.Errorf("%s=%s: parse_action(%q) = %v", tc.name, tc.value, tc.reply, m)
		}
	}
}

// TestConversation checks the pretraining data: the reply is tagged
// whenever a cue is present, every conversation fits the context, and the
// stream is fixed by the seed.
var answerTagRE = regexp.MustCompile(`(?s)<answer>(.*?)</answer>`)

func TestConversation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ps := allProblems()
	tagged, untagged := 0, 0
	for range 2000 {
		conv := Conversation(rng, ps[rng.IntN(len(ps))])
		toks, _, err := local.Encode(conv, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) > local.DemoConfig().Context {
			t.Fatalf("%d tokens: %v", len(toks), conv)
		}
		cue := false
		for _, m := range conv {
			if m.Role == "assistant" {
				isTagged := answerTagRE.MatchString(m.Content)
				if cue && !isTagged {
					t.Fatalf("untagged reply after a cue: %v", conv)
				}
				if !cue {
					if isTagged {
						tagged++
					} else {
						untagged++
					}
				}
				continue
			}
			cue = cue || strings.Contains(m.Content, cueMark)
		}
	}
	if share := float64(tagged) / float64(tagged+untagged); share < 0.1 || share > 0.3 {
		t.Errorf("tagged share without a cue %.2f, want about %.2f", share, untaggedTagRate)
	}
	a := Conversation(rand.New(rand.NewPCG(3, 4)), ps[7])
	b := Conversation(rand.New(rand.NewPCG(3, 4)), ps[7])
	if !reflect.DeepEqual(a, b) {
		t.Error("Conversation is not fixed by the seed")
	}
}

// TestPretrainDeterministic runs a few steps twice: same options, same
// weights.
func TestPretrainDeterministic(t *testing.T) {
	ctx := context.Background()
	o := PretrainOptions{Seed: 3, Steps: 2, Batch: 4}
	a, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Seed = 4
	c, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() {
		t.Errorf("digests %s %s (seed 3 twice), %s (seed 4)", a.Digest(), b.Digest(), c.Digest())
	}
}
