package localserve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

var tinyCfg = local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 32, Heads: 4, DFF: 64, Context: 96}

func newModel(t testing.TB, seed uint64) *local.Model {
	t.Helper()
	m, err := local.New(tinyCfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// trained overfits a fresh model on one exchange, so that greedy decoding
// of that prompt gives the answer: weights whose outputs are known.
func trained(t testing.TB, seed uint64, user, answer string) *local.Model {
	t.Helper()
	m := newModel(t, seed)
	ids, mask, err := local.Encode([]schemas.Message{{Role: "user", Content: user}, {Role: "assistant", Content: answer}}, false)
	if err != nil {
		t.Fatal(err)
	}
	batch := []local.Example{{Tokens: ids, Mask: mask}}
	for range 150 {
		if _, err := m.TrainStep(context.Background(), batch, local.TrainOptions{LR: 1e-2, ClipNorm: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

type fixture struct {
	srv    *Server
	url    string
	client *models.Client
}

func start(t testing.TB, base *local.Model, o Options) *fixture {
	t.Helper()
	if o.Name == "" {
		o.Name = "base"
	}
	s, err := New(base, o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	f := &fixture{srv: s, url: ts.URL + "/v1"}
	f.client = f.clientFor(t, o.Name)
	return f
}

func (f *fixture) clientFor(t testing.TB, name string) *models.Client {
	t.Helper()
	c, err := models.New(models.Config{Endpoints: []string{f.url}, Model: name, Concurrency: 64, Retry: models.RetryPolicy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func greedy(maxTok int64) models.Sampling {
	return models.Sampling{Temperature: models.Ptr(0.0), MaxTokens: models.Ptr(maxTok)}
}

func ask(t testing.TB, c *models.Client, content string, s models.Sampling) *models.Response {
	t.Helper()
	r, err := c.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: content}}, Sampling: s})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func post(t testing.TB, url string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestChatRoundTrip(t *testing.T) {
	f := start(t, trained(t, 1, "hi", "yes"), Options{})
	r := ask(t, f.client, "hi", greedy(20))
	if r.Content != "yes" || r.FinishReason != "stop" || r.Model != "base" {
		t.Errorf("got content %q finish %q model %q, want yes/stop/base", r.Content, r.FinishReason, r.Model)
	}
	ids, _, _ := local.Encode([]schemas.Message{{Role: "user", Content: "hi"}}, true)
	if r.UsageMissing || r.PromptTokens != int64(len(ids)) || r.CompletionTokens != 4 { // "yes" + <|end|>
		t.Errorf("usage %d/%d (missing %v), want %d/4", r.PromptTokens, r.CompletionTokens, r.UsageMissing, len(ids))
	}
	// max_tokens bounds the reply.
	r = ask(t, f.client, "hi", greedy(2))
	if r.Content != "ye" || r.FinishReason != "length" || r.CompletionTokens != 2 {
		t.Errorf("max_tokens 2: %q %q %d", r.Content, r.FinishReason, r.CompletionTokens)
	}
	// A stop sequence cuts the text before it.
	s := greedy(20)
	s.Stop = []string{"s"}
	r = ask(t, f.client, "hi", s)
	if r.Content != "ye" || r.FinishReason != "stop" || r.CompletionTokens != 3 {
		t.Errorf("stop s: %q %q %d", r.Content, r.FinishReason, r.CompletionTokens)
	}
	// The choice names the stop string that ended it (vLLM's stop_reason),
	// null when the end token or max_tokens did; stop is a string or a list.
	root := strings.TrimSuffix(f.url, "/v1")
	for _, tc := range []struct {
		stop any
		max  int
		want string
	}{
		{nil, 20, `"message":{"role":"assistant","content":"yes","tool_calls":[]},"finish_reason":"stop","stop_reason":null}`},
		{"es", 20, `"message":{"role":"assistant","content":"y","tool_calls":[]},"finish_reason":"stop","stop_reason":"es"}`},
		{[]string{"q", "s", "e"}, 20, `"message":{"role":"assistant","content":"y","tool_calls":[]},"finish_reason":"stop","stop_reason":"e"}`},
		{[]string{"q"}, 2, `"message":{"role":"assistant","content":"ye","tool_calls":[]},"finish_reason":"length","stop_reason":null}`},
	} {
		body := map[string]any{"messages": []any{map[string]string{"role": "user", "content": "hi"}}, "temperature": 0, "max_tokens": tc.max}
		if tc.stop != nil {
			body["stop"] = tc.stop
		}
		if status, text := post(t, root+PathChat, body); status != 200 || !strings.Contains(text, tc.want) {
			t.Errorf("stop %v: HTTP %d %s\nwant it to hold %s", tc.stop, status, text, tc.want)
		}
	}
}

func TestCutStop(t *testing.T) {
	for _, tc := range []struct {
		text  string
		stops []string
		want  string // the text kept, or "-" for no stop
		stop  string
	}{
		{"abcd", nil, "-", ""},
		{"abcd", []string{"x"}, "-", ""},
		{"abcd", []string{"c"}, "ab", "c"},
		{"abcd", []string{"bcd", "c"}, "ab", "c"},    // "c" completes first
		{"abcd", []string{"bc", "c"}, "a", "bc"},     // both complete at "c": the first listed
		{"abcd", []string{"c", "bc"}, "ab", "c"},     // likewise
		{"abcabc", []string{"ca", "b"}, "a", "b"},    // the first match of each counts
		{"<a></a>", []string{"</a>"}, "<a>", "</a>"}, // a stop is a string, not a token
		{"abcd", []string{"abcd", "abcde"}, "", "abcd"},
	} {
		cut, ok := cutStop(tc.text, tc.stops)
		got, stop := "-", ""
		if ok {
			got, stop = tc.text[:cut.at], tc.text[cut.at:cut.at+cut.n]
		}
		if got != tc.want || stop != tc.stop {
			t.Errorf("cutStop(%q, %q) keeps %q stopped by %q, want %q by %q", tc.text, tc.stops, got, stop, tc.want, tc.stop)
		}
	}
}

func TestErrors(t *testing.T) {
	f := start(t, newModel(t, 1), Options{Name: "base", NoTruncate: true, AdapterDir: t.TempDir()})
	long := strings.Repeat("x", tinyCfg.Context)
	cases := []struct {
		name   string
		path   string
		body   any
		status int
		want   string
	}{
		{"stream", PathChat, map[string]any{"model": "base", "stream": true, "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "stream is not supported"},
		{"unknown model", PathChat, map[string]any{"model": "nope", "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 404, "does not exist"},
		{"no messages", PathChat, map[string]any{"model": "base"}, 400, "messages is empty"},
		{"bad role", PathChat, map[string]any{"model": "base", "messages": []any{map[string]string{"role": "robot", "content": "a"}}}, 400, "robot"},
		{"too long", PathChat, map[string]any{"model": "base", "messages": []any{map[string]string{"role": "user", "content": long}}}, 400, "maximum context length"},
		{"n", PathChat, map[string]any{"model": "base", "n": 2, "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "one choice"},
		{"bad json", PathChat, "{", 400, "invalid JSON"},
		{"empty stop", PathChat, map[string]any{"model": "base", "stop": []string{"x", ""}, "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "stop cannot contain an empty string"},
		{"empty stop string", PathChat, map[string]any{"model": "base", "stop": "", "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "stop cannot contain an empty string"},
		{"bad stop", PathChat, map[string]any{"model": "base", "stop": 3, "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "stop: want a string"},
		{"tool_choice unknown", PathChat, map[string]any{"model": "base", "tool_choice": "any", "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
			"messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "Invalid value for `tool_choice`"},
		{"tool_choice without tools", PathChat, map[string]any{"model": "base", "tool_choice": "required", "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "`tools` must be set"},
		{"tool_choice names no tool", PathChat, map[string]any{"model": "base", "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}},
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}, "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "does not match"},
		{"tool without name", PathChat, map[string]any{"model": "base", "tools": []any{map[string]any{"type": "function", "function": map[string]any{}}},
			"messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "name is required"},
		{"tools not a list", PathChat, map[string]any{"model": "base", "tools": "f", "messages": []any{map[string]string{"role": "user", "content": "a"}}}, 400, "invalid JSON body"},
		{"load no path", PathLoad, map[string]string{"lora_name": "x"}, 400, "must be provided"},
		{"load missing file", PathLoad, map[string]string{"lora_name": "x", "lora_path": "nonexistent/ckpt"}, 400, `lora_path \"nonexistent/ckpt\": no such file`},
		{"load base name", PathLoad, map[string]string{"lora_name": "base", "lora_path": "/x"}, 400, "already been loaded"},
		{"unload unknown", PathUnload, map[string]string{"lora_name": "x"}, 404, "cannot be found"},
		{"unload base", PathUnload, map[string]string{"lora_name": "base"}, 400, "base model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any = c.body
			if s, ok := c.body.(string); ok {
				body = json.RawMessage(s)
			}
			status, text := post(t, strings.TrimSuffix(f.url, "/v1")+c.path, body)
			if status != c.status || !strings.Contains(text, c.want) {
				t.Errorf("HTTP %d %s, want %d containing %q", status, text, c.status, c.want)
			}
			var e struct {
				Error struct{ Message, Type string }
			}
			if json.Unmarshal([]byte(text), &e) != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("not an OpenAI error body: %s", text)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	f := start(t, newModel(t, 1), Options{})
	r := ask(t, f.client, strings.Repeat("x", 3*tinyCfg.Context), greedy(8))
	if r.PromptTokens+r.CompletionTokens > int64(tinyCfg.Context) || r.PromptTokens > int64(tinyCfg.Context-8) {
		t.Errorf("prompt %d + completion %d tokens past the context %d", r.PromptTokens, r.CompletionTokens, tinyCfg.Context)
	}
	ids := truncate([]int{local.TokBOS, 1, 2, 3, 4, 5}, 3)
	if fmt.Sprint(ids) != fmt.Sprint([]int{local.TokBOS, 4, 5}) {
		t.Errorf("truncate: %v", ids)
	}
}

// TestBatching: concurrent requests share Generate calls, and a seeded
// request gets the same text alone as in a crowd.
func TestBatching(t *testing.T) {
	f := start(t, newModel(t, 4), Options{Window: 20 * time.Millisecond})
	sample := func(seed int64) models.Sampling {
		return models.Sampling{Temperature: models.Ptr(1.0), MaxTokens: models.Ptr(int64(16)), Seed: models.Ptr(seed)}
	}
	alone := ask(t, f.client, "q", sample(5)).Content
	before := f.srv.calls.Load()
	const n = 16
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := f.client.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "q"}}, Sampling: sample(int64(i + 1))})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = r.Content
		})
	}
	wg.Wait()
	calls := f.srv.calls.Load() - before
	if calls >= n || calls < 1 {
		t.Errorf("%d concurrent requests took %d Generate calls, want fewer", n, calls)
	}
	if got[4] != alone {
		t.Errorf("seed 5: %q in a batch, %q alone", got[4], alone)
	}
	distinct := map[string]bool{}
	for _, g := range got {
		distinct[g] = true
	}
	if len(distinct) < 2 {
		t.Errorf("16 seeds gave one text %q", got[0])
	}
}

type card struct {
	ID     string  `json:"id"`
	Parent *string `json:"parent"`
	Digest string  `json:"digest"`
}

func listModels(t testing.TB, url string) map[string]card {
	t.Helper()
	resp, err := http.Get(url + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct{ Data []card }
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	out := map[string]card{}
	for _, c := range l.Data {
		out[c.ID] = c
	}
	return out
}

func TestLoadUnloadAdapter(t *testing.T) {
	base := trained(t, 1, "hi", "yes")
	dir := t.TempDir()
	f := start(t, base, Options{AdapterDir: filepath.Dir(dir)})
	next := trained(t, 2, "hi", "no")
	if err := next.Save(filepath.Join(dir, CheckpointFile), true); err != nil {
		t.Fatal(err)
	}
	root := strings.TrimSuffix(f.url, "/v1")
	load := map[string]string{"lora_name": "base@run/1", "lora_path": dir}
	if status, text := post(t, root+PathLoad, load); status != 200 {
		t.Fatalf("load: HTTP %d %s", status, text)
	}
	// A second load of the same name is the 400 the finetune stage's
	// reload recognises.
	if status, text := post(t, root+PathLoad, load); status != 400 || !strings.Contains(text, "already") {
		t.Errorf("second load: HTTP %d %s", status, text)
	}
	ms := listModels(t, f.url)
	if ms["base"].Digest != base.Digest() || ms["base@run/1"].Digest != next.Digest() || ms["base@run/1"].Parent == nil || *ms["base@run/1"].Parent != "base" {
		t.Errorf("models: %+v", ms)
	}
	swapped := f.clientFor(t, "base@run/1")
	if r := ask(t, swapped, "hi", greedy(20)); r.Content != "no" || r.Model != "base@run/1" {
		t.Errorf("adapter: %q from %q, want no from base@run/1", r.Content, r.Model)
	}
	if r := ask(t, f.client, "hi", greedy(20)); r.Content != "yes" {
		t.Errorf("base after load: %q, want yes", r.Content)
	}
	if status, text := post(t, root+PathUnload, map[string]string{"lora_name": "base@run/1"}); status != 200 {
		t.Fatalf("unload: HTTP %d %s", status, text)
	}
	if _, err := swapped.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("after unload: %v, want a 404", err)
	}
	if _, ok := listModels(t, f.url)["base@run/1"]; ok {
		t.Error("unloaded model still listed")
	}
}

func TestLoadPath(t *testing.T) {
	m := newModel(t, 3)
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "weights.bin")
	if err := mkdirSave(m, file); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, dir, filepath.Join(dir, "sub")} {
		got, err := LoadPath(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got.Digest() != m.Digest() {
			t.Errorf("%s: digest differs", p)
		}
	}
	if err := mkdirSave(m, filepath.Join(dir, "other.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPath(dir); err == nil || !strings.Contains(err.Error(), "found 2") {
		t.Errorf("two checkpoints: %v", err)
	}
}

func mkdirSave(m *local.Model, p string) error {
	if err := mkdirAll(filepath.Dir(p)); err != nil {
		return err
	}
	return m.Save(p, false)
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func TestResolve(t *testing.T) {
	next := trained(t, 2, "hi", "no")
	var mu sync.Mutex
	asked := map[string]int{}
	f := start(t, trained(t, 1, "hi", "yes"), Options{Resolve: func(_ context.Context, name string) (*local.Model, string, error) {
		mu.Lock()
		asked[name]++
		mu.Unlock()
		switch name {
		case "v2":
			return next, "bucket:v2", nil
		case "broken":
			return nil, "", fmt.Errorf("checkpoint of %s is corrupt", name)
		}
		return nil, "", nil
	}})
	c := f.clientFor(t, "v2")
	for range 2 {
		if r := ask(t, c, "hi", greedy(8)); r.Content != "no" || r.Model != "v2" {
			t.Errorf("resolved model: %q from %q", r.Content, r.Model)
		}
	}
	if asked["v2"] != 1 || listModels(t, f.url)["v2"].Digest != next.Digest() {
		t.Errorf("resolve asked %v times; models %v", asked, listModels(t, f.url))
	}
	if _, err := f.clientFor(t, "nope").Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown: %v", err)
	}
	if _, err := f.clientFor(t, "broken").Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("broken: %v", err)
	}
}
