package episode

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
)

type metaFilterDomain struct{ fakeDomain }

func (metaFilterDomain) Name() string { return "metafilter" }

func (metaFilterDomain) HookMeta(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != "secret" {
			out[k] = v
		}
	}
	return out
}

// Hooks never see reference answers in the meta, and a domain can hide
// more; the shared decoded meta stays whole.
func TestHookMetaHidesReferences(t *testing.T) {
	tests := []struct {
		name string
		dom  Domain
		meta map[string]any
		want []string
	}{
		{"nothing to hide", &fakeDomain{}, map[string]any{"source": "nq", "level": 3}, []string{"level", "source"}},
		{"reference keys", &fakeDomain{}, map[string]any{"source": "nq", "golden_answers": []any{"x"}, "answer": "x", "reward_model": map[string]any{}}, []string{"source"}},
		{"domain filter", &metaFilterDomain{}, map[string]any{"source": "nq", "secret": 1, "solution": "y"}, []string{"source"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.meta)
			got := hookMeta(tt.dom, tt.meta)
			keys := slices.Sorted(maps.Keys(got))
			if !slices.Equal(keys, tt.want) {
				t.Errorf("hooks see %v, want %v", keys, tt.want)
			}
			if len(tt.meta) != before {
				t.Errorf("the shared meta lost keys")
			}
		})
	}
}

// A task's meta reaches hooks decoded, numbers as written, without
// reference answers and as the domain filters it; a meta that is not a
// JSON object is an error.
func TestTaskMeta(t *testing.T) {
	const meta = `{"source": "nq", "secret": 1, "answer": "x", "n": 2}`
	tests := []struct {
		name string
		dom  Domain
		want []string
	}{
		{"plain domain", &fakeDomain{}, []string{"n", "secret", "source"}},
		{"filtering domain", &metaFilterDomain{}, []string{"n", "source"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := taskMeta(tt.dom, meta)
			if err != nil {
				t.Fatal(err)
			}
			if keys := slices.Sorted(maps.Keys(m)); !slices.Equal(keys, tt.want) {
				t.Errorf("hooks see %v, want %v", keys, tt.want)
			}
			if m["n"] != int64(2) {
				t.Errorf("n = %#v, want int64 2", m["n"])
			}
		})
	}
	if _, err := taskMeta(&fakeDomain{}, `[1]`); err == nil {
		t.Error("a meta that is not an object was accepted")
	}
}

// Harness hooks get copies of the state: whatever they change in it, the
// loop's transcript, its later states and the task stay as they were.
func TestHooksCannotChangeTheLoopsState(t *testing.T) {
	src := `FORMAT_RETRIES = 3

def should_stop(state):
    state["messages"].append({"role": "user", "content": "injected"})
    state["messages"][0]["content"] = "changed by should_stop"
    state["task"]["meta"]["rating"] = 0
    state["retries"]["format"] = 7
    return False

def build_messages(state):
    msgs = state["messages"]
    msgs[0]["content"] += "!"
    if state["last_action"]:
        state["last_action"]["kind"] = "changed"
    return [{"role": "system", "content": "s"}] + msgs

def parse_action(text, state):
    if "<answer>" not in text:
        return {"kind": "invalid", "error": "meta %d retries %d" % (state["task"]["meta"]["rating"], state["retries"]["format"])}
    return {"kind": "answer", "answer": "%d messages" % len(state["messages"])}
`
	srv := modeltest.NewServer(t, modeltest.Script(modeltest.Reply{Content: "thinking"}, modeltest.Reply{Content: "<answer>x</answer>"}))
	h := loadHarness(t, src)
	tk := task("t1", "What is six times seven?", "42")
	res := Run(context.Background(), &fakeDomain{contract: fakeContract()}, h, newClient(t, srv.URL, 5*time.Second), tk, Config{})
	if res.FinishReason != FinishAnswer || res.Answer != "4 messages" {
		t.Fatalf("finish %s answer %q error %q", res.FinishReason, res.Answer, res.Error)
	}
	reqs := srv.Requests()
	for i, r := range reqs {
		// build_messages' own change is sent; nothing from earlier calls.
		if got := r.Messages[1].Content; got != "What is six times seven?!" {
			t.Errorf("call %d sent %q", i+1, got)
		}
	}
	if fb := reqs[1].Messages[3].Content; !strings.Contains(fb, "meta 1500 retries 0") {
		t.Errorf("feedback %q: parse_action saw changes of other calls", fb)
	}
	if got := res.Messages[1].Content; got != "What is six times seven?" || roles(res.Messages) != "system,user,assistant,user,assistant" {
		t.Errorf("transcript %v", res.Messages)
	}
}

// differsFromDefault names the first message a custom context changes,
// counting SYSTEM_PROMPT's message as message 0.
func TestDiffersFromDefault(t *testing.T) {
	sys := schemas.Message{Role: "system", Content: "sys"}
	u1 := schemas.Message{Role: "user", Content: "q"}
	a1 := schemas.Message{Role: "assistant", Content: "a"}
	other := schemas.Message{Role: "user", Content: "other"}
	tests := []struct {
		name   string
		system bool
		msgs   []schemas.Message
		want   int
	}{
		{"same", true, []schemas.Message{sys, u1, a1}, -1},
		{"same without a prompt", false, []schemas.Message{u1, a1}, -1},
		{"system changed", true, []schemas.Message{other, u1, a1}, 0},
		{"middle changed", true, []schemas.Message{sys, other, a1}, 1},
		{"shorter", true, []schemas.Message{sys, u1}, 2},
		{"longer", false, []schemas.Message{u1, a1, other}, 2},
		{"empty", true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &loop{st: harness.State{Messages: []schemas.Message{u1, a1}}}
			if tt.system {
				l.systemPrompt = sys.Content
			}
			if got := l.differsFromDefault(tt.msgs); got != tt.want {
				t.Errorf("differsFromDefault = %d, want %d", got, tt.want)
			}
		})
	}
}
