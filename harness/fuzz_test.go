package harness

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// FuzzLoad feeds arbitrary source to Load and every hook the result
// defines: the runtime must never panic and must return a harness or an
// error, never both or neither.
func FuzzLoad(f *testing.F) {
	example, _ := os.ReadFile("testdata/searchqa_like.star")
	for _, seed := range []string{
		"",
		string(example),
		"MAX_TURNS = 3\nSYSTEM_PROMPT = 'x'\n",
		"def parse_action(text, state):\n    return {'kind': 'answer', 'answer': text}\n",
		"def build_messages(state):\n    return state['messages']\n",
		"def should_stop(state):\n    while True:\n        pass\n",
		"def f(:\n",
		"load('x', 'y')\n",
		"x = 1 // 0\n",
		"USER_PROMPT = '{nope}'\n",
		"def format_observation(obs):\n    l = []\n    l.append(l)\n    return l\n",
		"def on_error(kind, detail, state):\n    return re.sub(r'(a)\\1', 'b', detail)\n",
		"X = [x * 2 for x in range(10)]\nY = {str(k): v for k, v in enumerate(X)}\n",
		"def parse_action(text, state):\n    return defaults.parse_action(text, state)\n",
		"MAX_TURNS = 1 << 70\n",
		"\x00\xff\xfe",
		"def build_messages(*a, **k):\n    return [{'role': 'user', 'content': json.encode(k)}]\n",
	} {
		f.Add([]byte(seed))
	}
	args := map[string][]any{
		"format_observation": {map[string]any{"question": "q"}},
		"build_messages":     {exampleState(2)},
		"parse_action":       {"<answer>4</answer>", exampleState(0)},
		"format_tool_result": {map[string]any{"docs": []any{}}, exampleState(1)},
		"on_error":           {"format", "detail", exampleState(1)},
		"should_stop":        {exampleState(1)},
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		opts := Options{MaxSteps: 20_000, LoadSteps: 20_000, CallTimeout: 200 * time.Millisecond, LoadTimeout: 200 * time.Millisecond}
		h, err := Load("fuzz.star", src, opts)
		if (h == nil) == (err == nil) {
			t.Fatalf("Load returned harness %v and error %v", h, err)
		}
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) || len(le.Problems) == 0 {
				t.Fatalf("Load error %T %v is not a *LoadError with problems", err, err)
			}
			return
		}
		for _, spec := range h.Contract().Hooks {
			v, err := h.Call(context.Background(), spec.Name, args[spec.Name]...)
			if err != nil {
				var he *HookError
				if !errors.As(err, &he) {
					t.Fatalf("hook %s: error %T %v is not a *HookError", spec.Name, err, err)
				}
				continue
			}
			if err := spec.Returns.Validate(v, "result"); err != nil {
				t.Fatalf("hook %s returned an invalid result without error: %v", spec.Name, err)
			}
		}
	})
}
