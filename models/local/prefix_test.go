package local

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

var prefixCfg = Config{Vocab: TokenizerVocab, Layers: 2, DModel: 32, Heads: 4, DFF: 64, Context: 160}

// secondTurns builds each conversation's next prompt the way an episode
// does: the first prompt, the reply's tokens (its end token included),
// then a tool result and a new assistant turn. cut > 0 keeps only that
// many reply tokens, as when a client sends the reply back re-encoded.
func secondTurns(first [][]int, gens []Generation, cut int) [][]int {
	out := make([][]int, len(first))
	for i, p := range first {
		reply := gens[i].Tokens
		if cut > 0 && cut < len(reply) {
			reply = reply[:cut]
		}
		next := append(slices.Clone(p), reply...)
		next = append(next, TokUser)
		next = append(next, EncodeText(fmt.Sprintf(" result %d: passage text", i))[1:]...)
		out[i] = append(next, TokEnd, TokAssistant)
	}
	return out
}

// TestPrefixCacheSameTokens: an episode's second turn decodes to the same
// tokens whether its first turn's rows come from the cache or are fed
// again, for replies sent back whole or cut (a prefix ending mid-block),
// and with prompts split across prefill chunks.
func TestPrefixCacheSameTokens(t *testing.T) {
	m := newTestModel(t, prefixCfg, 5)
	var first [][]int
	var opts []SampleOptions
	for i := range 9 {
		first = append(first, EncodeText(fmt.Sprintf("system: answer briefly.\nquestion %d: where does person %d live?", i, 7*i)))
		opts = append(opts, SampleOptions{MaxNewTokens: 24, Temperature: 1, TopK: 40, Seed: uint64(100 + i)})
	}
	for _, tc := range []struct {
		name    string
		cut     int
		prefill int
	}{{"whole reply", 0, 2048}, {"cut reply", 5, 2048}, {"prefill chunks of 7", 0, 7}} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(r int) { prefillRows = r }(prefillRows)
			prefillRows = tc.prefill
			cache := NewPrefixCache(64 << 20)
			gens := sameWithCache(t, m, "first turn", first, opts, cache)
			before := cache.Stats()
			second := secondTurns(first, gens, tc.cut)
			sameWithCache(t, m, "second turn", second, opts, cache)
			st := cache.Stats()
			reused, want := st.ReusedRows-before.ReusedRows, 0
			for i := range first {
				held := append(slices.Clone(first[i]), gens[i].Tokens[:len(gens[i].Tokens)-1]...)
				want += commonPrefix(held, second[i][:len(second[i])-1])
			}
			if reused != int64(want) || reused == 0 {
				t.Errorf("second turns reused %d rows, want %d (what they share with the first turns' fed tokens)", reused, want)
			}
			if fed := st.FedRows - before.FedRows; fed+reused != int64(totalLen(second)) {
				t.Errorf("fed %d + reused %d rows, want %d prompt tokens", fed, reused, totalLen(second))
			}
		})
	}
}

// sameWithCache decodes prompts with the cache and without it, fails the
// test unless every prompt gets the same tokens, and returns them.
func sameWithCache(t *testing.T, m *Model, what string, prompts [][]int, opts []SampleOptions, cache *PrefixCache) []Generation {
	t.Helper()
	ctx := context.Background()
	cached, err := m.GenerateEach(ctx, prompts, opts, cache)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := m.GenerateEach(ctx, prompts, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cached {
		if !slices.Equal(cached[i].Tokens, fresh[i].Tokens) {
			t.Fatalf("%s %d: %v with the cache, %v without", what, i, cached[i].Tokens, fresh[i].Tokens)
		}
	}
	return cached
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func totalLen(ps [][]int) int {
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	return n
}

// TestPrefixCacheNewWeights: after a training step the rows of the old
// weights are not reused, and a shared cache keeps two models apart.
func TestPrefixCacheNewWeights(t *testing.T) {
	ctx := context.Background()
	prompts := [][]int{EncodeText("system: be brief. question: what colour is the sky over the harbour?")}
	opts := []SampleOptions{{MaxNewTokens: 12, Temperature: 1, Seed: 3}}
	a, b := newTestModel(t, prefixCfg, 1), newTestModel(t, prefixCfg, 1)
	cache := NewPrefixCache(64 << 20)
	gens, err := a.GenerateEach(ctx, prompts, opts, cache)
	if err != nil {
		t.Fatal(err)
	}
	second := secondTurns(prompts, gens, 0)
	if _, err := b.GenerateEach(ctx, second, opts, cache); err != nil {
		t.Fatal(err)
	}
	if st := cache.Stats(); st.ReusedRows != 0 {
		t.Errorf("model b reused %d rows of model a", st.ReusedRows)
	}
	ex := Example{Tokens: second[0], Mask: make([]bool, len(second[0]))}
	ex.Mask[len(ex.Mask)-1] = true
	if _, err := a.TrainStep(ctx, []Example{ex}, TrainOptions{LR: 1e-2}); err != nil {
		t.Fatal(err)
	}
	got, err := a.GenerateEach(ctx, second, opts, cache)
	if err != nil {
		t.Fatal(err)
	}
	if st := cache.Stats(); st.ReusedRows != 0 {
		t.Errorf("the trained model reused %d rows of its old weights", st.ReusedRows)
	}
	want, err := a.GenerateEach(ctx, second, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0].Tokens, want[0].Tokens) {
		t.Errorf("trained model: %v with the cache, %v without", got[0].Tokens, want[0].Tokens)
	}
}

// TestPrefixCacheLimit: the cache never holds more than its limit, drops
// the least recently used sequence first, and skips one that cannot fit.
func TestPrefixCacheLimit(t *testing.T) {
	const key = 7
	seq := func(c int) []int {
		s := make([]int, 40)
		for i := range s {
			s[i] = c
		}
		return s
	}
	row := 100 // floats per token in this test
	c := NewPrefixCache(int64(4 * row * 40 * 2))
	c.store(key, seq(1), make([]float32, row*40))
	c.store(key, seq(2), make([]float32, row*40))
	if e, _ := c.lookup(key, append(seq(1), 9)); e == nil {
		t.Fatal("sequence 1 not found")
	}
	c.store(key, seq(3), make([]float32, row*40)) // evicts 2, the least recently used
	if c.used > c.limit {
		t.Errorf("holds %d bytes, limit %d", c.used, c.limit)
	}
	for _, tc := range []struct {
		c    int
		want int
	}{{1, 40}, {2, 0}, {3, 40}} {
		_, n := c.lookup(key, append(seq(tc.c), 9))
		if n != tc.want {
			t.Errorf("sequence %d: %d rows found, want %d", tc.c, n, tc.want)
		}
	}
	c.store(key, seq(4), make([]float32, row*40*3))
	if _, n := c.lookup(key, append(seq(1), 9)); n != 40 {
		t.Errorf("a sequence larger than the cache evicted others")
	}
	if _, n := c.lookup(key+1, append(seq(1), 9)); n != 0 {
		t.Errorf("another key found %d rows", n)
	}
	if _, n := c.lookup(key, seq(1)[:20]); n != 19 {
		t.Errorf("a 20-token prompt inside a held sequence reused %d rows, want 19 (its last token is always fed)", n)
	}
	if _, n := c.lookup(key, seq(1)[:16]); n != 0 {
		t.Errorf("a 16-token prompt reused %d rows, want 0 (15 usable tokens make no whole block)", n)
	}
}

// TestPrefixCacheSupersede: a sequence that holds another whole (an
// episode's next turn holding its first) frees it; one that parts from it
// within its whole blocks (another sample of the same prompt) leaves it.
func TestPrefixCacheSupersede(t *testing.T) {
	const key, row = 3, 10
	tokens := func(n, tail int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i % 7
		}
		for i := n - tail; i < n; i++ {
			s[i] = 100 + tail
		}
		return s
	}
	c := NewPrefixCache(1 << 20)
	first := tokens(40, 0)
	c.store(key, first, make([]float32, row*40))
	c.store(key, tokens(40, 10), make([]float32, row*40)) // another sample: shares 30 tokens, so 1 block
	if c.lru.Len() != 2 || c.used != 2*4*row*40 {
		t.Fatalf("two samples sharing a start: %d entries, %d bytes", c.lru.Len(), c.used)
	}
	next := append(slices.Clone(first), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	c.store(key, next, make([]float32, row*60))
	if c.lru.Len() != 2 || c.used != 4*row*(40+60) {
		t.Errorf("after the next turn: %d entries, %d bytes, want the other sample and the next turn (%d bytes)", c.lru.Len(), c.used, 4*row*100)
	}
	if e, n := c.lookup(key, append(slices.Clone(first), 99)); n != 40 || len(e.tokens) != 60 {
		t.Errorf("the first turn's prompt found %d rows in an entry of %d tokens, want 40 in the next turn's", n, len(e.tokens))
	}
	if _, n := c.lookup(key, append(tokens(40, 10), 99)); n != 40 {
		t.Errorf("the other sample found %d rows, want 40", n)
	}
}
