package searchdemo

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// TestPrefixCacheEpisodes: episodes played against the server with its
// prefix cache are the episodes played without it, message for message,
// and the cache spares the model the first turn when it feeds the second
// (the reply comes back as a tool call the chat template writes again, so
// this checks the template writes the bytes the model generated).
func TestPrefixCacheEpisodes(t *testing.T) {
	tasks := testTasks(t)[:30]
	cached, plain := newBench(t, 0), newBench(t, -1)
	for _, h := range []struct {
		name  string
		edits []string
	}{{"h0-local", nil}, {"TOPK=3", []string{"TOPK", "3"}}} {
		hv := variant(t, h.edits...)
		before := cached.srv.PrefixStats()
		got, want := cached.rollouts(t, hv, tasks, 2, 5), plain.rollouts(t, hv, tasks, 2, 5)
		for i := range got {
			g, w := withoutCallIDs(got[i].Messages), withoutCallIDs(want[i].Messages)
			if string(g) != string(w) || got[i].Reward != want[i].Reward {
				t.Fatalf("%s, episode %d differs with the prefix cache:\n%s\nwithout:\n%s", h.name, i, g, w)
			}
		}
		st := cached.srv.PrefixStats()
		reused, fed := st.ReusedRows-before.ReusedRows, st.FedRows-before.FedRows
		share := float64(reused) / float64(reused+fed)
		t.Logf("%s: %d episodes, %d prompt rows from the cache, %d fed (%.0f%% spared)", h.name, len(got), reused, fed, 100*share)
		// models/localserve checks the rows one second turn reuses; here,
		// that real episodes reach the cache: h0-local spares about half of
		// its prompt rows (each second turn holds its first, and all share
		// the system prompt and tools block), TOPK=3 more.
		if share < 0.4 {
			t.Errorf("%s: the cache gave %.0f%% of prompt rows, want ≥ 40%%", h.name, 100*share)
		}
	}
	if st := plain.srv.PrefixStats(); st.Lookups != 0 {
		t.Errorf("the server without a cache looked up %d prompts", st.Lookups)
	}
}

// withoutCallIDs is the transcript as JSON with the tool-call ids, which
// each server draws at random, left out.
func withoutCallIDs(msgs []schemas.Message) string {
	out := slices.Clone(msgs)
	for i := range out {
		out[i].ToolCallID = ""
		out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
		for j := range out[i].ToolCalls {
			out[i].ToolCalls[j].ID = ""
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}
