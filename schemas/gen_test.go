package schemas

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Test rows. Every generator is deterministic and gives each row distinct
// text, so a reader that mixes up rows or batches fails the comparisons.

func sampleTasks(n int) []Task {
	out := make([]Task, n)
	for i := range out {
		out[i] = Task{
			ID:       fmt.Sprintf("t%05d", i),
			Domain:   []string{"math", "searchqa", "chess"}[i%3],
			Split:    []string{"train", "search", "test"}[i%3],
			Question: fmt.Sprintf("What is %d + %d? Ünïcode ✓ %s", i, 2*i, strings.Repeat("x", i%7)),
			Answers:  []string{fmt.Sprint(3 * i), fmt.Sprintf("%d.0", 3*i)}[:i%3],
			Meta:     fmt.Sprintf(`{"row":%d}`, i),
		}
	}
	return out
}

func sampleMessages(i int) []Message {
	msgs := []Message{
		{Role: "system", Content: "You are a careful solver."},
		{Role: "user", Content: fmt.Sprintf("question %d", i)},
		{Role: "assistant", Content: fmt.Sprintf("thinking about %d", i)},
	}
	if i%2 == 0 {
		msgs[2].ToolCalls = []ToolCall{
			{ID: fmt.Sprintf("call_%d_a", i), Name: "search", Arguments: fmt.Sprintf(`{"q":"item %d"}`, i)},
			{ID: fmt.Sprintf("call_%d_b", i), Name: "lookup", Arguments: `{}`},
		}
		msgs = append(msgs, Message{Role: "tool", Name: "search", ToolCallID: fmt.Sprintf("call_%d_a", i), Content: "doc text"})
	}
	return msgs[:min(i%5, len(msgs))]
}

func sampleRollouts(n int) []Rollout {
	out := make([]Rollout, n)
	for i := range out {
		r := Rollout{
			Run:              "run-a",
			Position:         fmt.Sprintf("r%03d-w01-rollout", i%4),
			ModelID:          "m0",
			HarnessID:        fmt.Sprintf("h%02d", i%5),
			TaskID:           fmt.Sprintf("t%05d", i/4),
			Sample:           int32(i % 4),
			Seed:             int64(i) * 7919,
			Reward:           float64(i%10) / 10,
			Correct:          i%3 == 0,
			Answer:           fmt.Sprint(i),
			FinishReason:     "stop",
			Turns:            int32(i % 6),
			PromptTokens:     int64(100 + i),
			CompletionTokens: int64(20 + i),
			LatencyMS:        int64(1000 + i),
			Messages:         sampleMessages(i),
		}
		if i%7 == 0 {
			r.Error = fmt.Sprintf("timeout at turn %d", i%6)
		}
		for j := range i % 5 {
			r.Trace = append(r.Trace, TraceEvent{Turn: int32(j), Kind: "model", Action: fmt.Sprintf("act %d/%d", i, j), Feedback: "ok"})
		}
		out[i] = r
	}
	return out
}

func sampleSFT(n int) []SFTExample {
	out := make([]SFTExample, n)
	for i := range out {
		msgs := sampleMessages(i)
		mask := make([]bool, len(msgs))
		for j, m := range msgs {
			mask[j] = m.Role == "assistant"
		}
		out[i] = SFTExample{
			ExampleID: fmt.Sprintf("ex%05d", i),
			EpisodeID: fmt.Sprintf("ep%05d", i),
			TaskID:    fmt.Sprintf("t%05d", i/2),
			Messages:  msgs,
			TrainMask: mask,
		}
	}
	return out
}

func sampleEvals(n int) []Eval {
	out := make([]Eval, n)
	for i := range out {
		out[i] = Eval{
			HarnessID: fmt.Sprintf("h%02d", i%9), ModelID: "m1", TaskID: fmt.Sprintf("t%05d", i),
			K: 8, MeanReward: float64(i%8) / 8, PassAtK: float64(i % 2), MeanTurns: 1 + float64(i%4), MeanTokens: float64(300 + i),
		}
	}
	return out
}

func sampleCandidates(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{
			HarnessID: fmt.Sprintf("%064x", i), ParentID: fmt.Sprintf("%064x", i/2), Name: fmt.Sprintf("cand-%d", i),
			Hypothesis: "shorter prompts help", Axis: "prompt", Proposer: "mutate",
			Source: fmt.Sprintf("SYSTEM_PROMPT = \"v%d\"\nMAX_TURNS = %d\n", i, i%9),
		}
	}
	return out
}

// rolloutGen makes realistic rollouts for benchmarks: a system prompt shared
// by all rows, a user question shared by the samples of a task, a unique
// assistant answer of 200-500 characters, and four trace events. A pool of
// distinct rows is cycled with fresh scalars; Parquet compresses each page
// on its own, so the cycle (megabytes) is far longer than anything the
// compressor could exploit.
type rolloutGen struct {
	pool  []Rollout
	bytes int64 // approximate uncompressed bytes of the pool
}

func newRolloutGen(poolSize int) *rolloutGen {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 2000)
	syll := []string{"ka", "lo", "mi", "ra", "te", "su", "vin", "qua", "dor", "el", "an", "is", "or", "pe", "zu"}
	for i := range vocab {
		var b strings.Builder
		for range 1 + rng.IntN(3) {
			b.WriteString(syll[rng.IntN(len(syll))])
		}
		vocab[i] = b.String()
	}
	text := func(minLen, maxLen int) string {
		want := minLen + rng.IntN(maxLen-minLen+1)
		var b strings.Builder
		for b.Len() < want {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		return b.String()
	}
	system := []string{text(300, 300), text(320, 320), text(280, 280)}
	questions := make([]string, 500)
	for i := range questions {
		questions[i] = text(150, 300)
	}
	kinds := []string{"hook", "model", "tool", "model"}
	g := &rolloutGen{pool: make([]Rollout, poolSize)}
	for i := range g.pool {
		msgs := []Message{
			{Role: "system", Content: system[i%len(system)]},
			{Role: "user", Content: questions[(i/8)%len(questions)]},
			{Role: "assistant", Content: text(200, 500)},
		}
		if i%4 == 0 {
			msgs[2].ToolCalls = []ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: "search", Arguments: `{"query":"` + text(10, 40) + `"}`}}
		}
		trace := make([]TraceEvent, 4)
		for j := range trace {
			trace[j] = TraceEvent{Turn: int32(j / 2), Kind: kinds[j], Action: text(20, 60), Feedback: text(30, 120)}
		}
		g.pool[i] = Rollout{
			Run: "exp-2026-01", Position: "r003-w02-rollout", ModelID: "qwen3-4b@step12", HarnessID: "h0",
			Answer: text(5, 20), FinishReason: "stop", Messages: msgs, Trace: trace,
		}
		if i%50 == 0 {
			g.pool[i].Error = "model call: 503 Service Unavailable"
			g.pool[i].FinishReason = "error"
		}
		g.bytes += g.pool[i].approxSize()
	}
	return g
}

// row returns row i; rows share their text with the pool.
func (g *rolloutGen) row(i int) Rollout {
	r := g.pool[i%len(g.pool)]
	r.TaskID = "task-" + strconv.Itoa(i/8)
	r.Sample = int32(i % 8)
	r.Seed = int64(i)*2654435761 + 17
	r.Reward = float64(i%5) / 4
	r.Correct = i%5 == 4
	r.Turns = int32(1 + i%4)
	r.PromptTokens = int64(600 + i%900)
	r.CompletionTokens = int64(80 + i%400)
	r.LatencyMS = int64(200 + i%5000)
	return r
}
