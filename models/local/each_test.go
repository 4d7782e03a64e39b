package local

import (
	"context"
	"slices"
	"testing"
)

// TestGenerateEachMatchesAlone: a prompt batched with others under its own
// options gets the tokens Generate gives it alone, for each kind of option.
func TestGenerateEachMatchesAlone(t *testing.T) {
	m := newTestModel(t, smallCfg, 3)
	ctx := context.Background()
	prompts := [][]int{EncodeText("hello"), EncodeText("another prompt"), {TokBOS, TokUser, 'x', TokEnd, TokAssistant}, EncodeText("q")}
	opts := []SampleOptions{
		{MaxNewTokens: 12, Temperature: 1, Seed: 7},
		{MaxNewTokens: 5, Temperature: 0.7, TopK: 20, Seed: 8},
		{MaxNewTokens: 20, Temperature: 0},
		{MaxNewTokens: 9, Temperature: 1.3, TopP: 0.9, Seed: 7},
	}
	got, err := m.GenerateEach(ctx, prompts, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		alone, err := m.Generate(ctx, prompts[i:i+1], opts[i])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[i].Tokens, alone[0].Tokens) {
			t.Errorf("prompt %d: batched %v, alone %v", i, got[i].Tokens, alone[0].Tokens)
		}
		if len(got[i].Tokens) > opts[i].MaxNewTokens {
			t.Errorf("prompt %d: %d tokens, max %d", i, len(got[i].Tokens), opts[i].MaxNewTokens)
		}
	}
	if _, err := m.GenerateEach(ctx, prompts, opts[:1], nil); err == nil {
		t.Error("mismatched options accepted")
	}
	bad := slices.Clone(opts)
	bad[2].MaxNewTokens = 0
	if _, err := m.GenerateEach(ctx, prompts, bad, nil); err == nil {
		t.Error("max new tokens 0 accepted")
	}
}
