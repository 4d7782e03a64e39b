package episode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
)

// A harness hook that passes a memory limit ends its episode with an
// error that names the limit; the episode loop, which sets no harness
// options, gets the runtime's default limits, and the process lives on.
func TestHookMemoryLimitEndsEpisode(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"list repetition", "def parse_action(text, state):\n    x = [0] * ((1 << 30) - 1)\n    return None\n",
			"hook parse_action: h.star:2:13: memory limit: * would make a list of 1073741823 elements"},
		{"json nesting", "def parse_action(text, state):\n    return json.decode('[' * 5000000 + ']' * 5000000)\n",
			"json.decode: input nested deeper than 1000 levels (MaxNesting)"},
		{"string doubling", "def parse_action(text, state):\n    while True:\n        text += text\n",
			"memory limit: += would make a string of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "<answer>1</answer>"}))
			h := loadHarness(t, tc.src)
			start := time.Now()
			res := Run(context.Background(), &fakeDomain{contract: fakeContract()}, h, newClient(t, srv.URL, time.Minute), task("t", "q", "1"), Config{})
			if res.FinishReason != FinishError || !strings.Contains(res.Error, tc.want) {
				t.Errorf("finish %s error %q, want one containing %q", res.FinishReason, res.Error, tc.want)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("the episode took %v", el)
			}
		})
	}
}
