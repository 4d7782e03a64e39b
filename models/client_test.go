package models_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
)

// fastRetry keeps retrying tests quick.
var fastRetry = models.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}

func newClient(t *testing.T, cfg models.Config) *models.Client {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.Retry == (models.RetryPolicy{}) {
		cfg.Retry = fastRetry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := models.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func hello() models.Request {
	return models.Request{Messages: []schemas.Message{{Role: "user", Content: "hello there"}}}
}

func TestChatFaults(t *testing.T) {
	ok := modeltest.Reply{Content: "fine"}
	cases := []struct {
		name  string
		fault modeltest.Reply
		kind  models.Kind
	}{
		{"rate limited", modeltest.Reply{Fault: modeltest.FaultRateLimit}, models.KindRateLimited},
		{"500", modeltest.Reply{Fault: modeltest.FaultServerError}, models.KindServerError},
		{"503", modeltest.Reply{Fault: modeltest.FaultUnavailable}, models.KindServerError},
		{"502 status", modeltest.Reply{Fault: modeltest.FaultStatus, Status: 502}, models.KindServerError},
		{"408 status", modeltest.Reply{Fault: modeltest.FaultStatus, Status: 408}, models.KindTimeout},
		{"dropped before reply", modeltest.Reply{Fault: modeltest.FaultDrop}, models.KindConnection},
		{"dropped mid body", modeltest.Reply{Fault: modeltest.FaultDropMidBody}, models.KindConnection},
		{"malformed json", modeltest.Reply{Fault: modeltest.FaultMalformed}, models.KindMalformed},
		{"truncated json", modeltest.Reply{Fault: modeltest.FaultTruncated}, models.KindMalformed},
		{"empty choices", modeltest.Reply{Fault: modeltest.FaultEmptyChoices}, models.KindMalformed},
		{"html 200", modeltest.Reply{Fault: modeltest.FaultStatus, Status: 200, Body: "<html>proxy</html>"}, models.KindMalformed},
		{"slow", modeltest.Reply{Delay: 5 * time.Second}, models.KindTimeout},
	}
	// Only the slow case needs a short timeout; the others keep a generous
	// one so that a loaded machine cannot turn them into timeouts.
	timeout := func(r modeltest.Reply) time.Duration {
		if r.Delay > 0 {
			return 300 * time.Millisecond
		}
		return 10 * time.Second
	}
	for _, tc := range cases {
		t.Run(tc.name+"/then ok", func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Script(tc.fault, ok))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}, Timeout: timeout(tc.fault)})
			res, err := c.Chat(context.Background(), hello())
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if res.Content != "fine" || res.Attempts != 2 || srv.Calls() != 2 {
				t.Fatalf("content %q attempts %d calls %d, want fine 2 2", res.Content, res.Attempts, srv.Calls())
			}
		})
		t.Run(tc.name+"/exhausted", func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(tc.fault))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}, Timeout: timeout(tc.fault)})
			_, err := c.Chat(context.Background(), hello())
			var me *models.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T), want *models.Error", err, err)
			}
			if me.Kind != tc.kind || me.Attempts != fastRetry.Attempts || srv.Calls() != fastRetry.Attempts {
				t.Fatalf("kind %s attempts %d calls %d, want %s %d: %v", me.Kind, me.Attempts, srv.Calls(), tc.kind, fastRetry.Attempts, err)
			}
			if me.Endpoint != srv.URL || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), string(tc.kind)) {
				t.Fatalf("error does not name endpoint %s and kind: %v", srv.URL, err)
			}
			if !tc.kind.Retryable() {
				t.Fatalf("kind %s should be retryable", tc.kind)
			}
		})
	}
}

func TestChatPermanentFailures(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		kind    models.Kind
		message string
	}{
		{"400 openai body", 400, `{"error":{"message":"messages too long","type":"invalid_request_error"}}`, models.KindBadRequest, "messages too long"},
		{"400 vllm body", 400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","code":400}`, models.KindBadRequest, "max_tokens is too large"},
		{"422 fastapi body", 422, `{"detail":"field required"}`, models.KindBadRequest, "field required"},
		{"401", 401, `{"error":{"message":"invalid api key"}}`, models.KindAuth, "invalid api key"},
		{"403 text body", 403, `forbidden here`, models.KindAuth, "forbidden here"},
		{"404 wrong model", 404, `{"error":{"message":"The model foo does not exist."}}`, models.KindBadRequest, "does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Fault: modeltest.FaultStatus, Status: tc.status, Body: tc.body}))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
			_, err := c.Chat(context.Background(), hello())
			var me *models.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v, want *models.Error", err)
			}
			if me.Kind != tc.kind || me.Attempts != 1 || srv.Calls() != 1 || me.Status != tc.status {
				t.Fatalf("kind %s attempts %d calls %d status %d, want %s 1 1 %d", me.Kind, me.Attempts, srv.Calls(), me.Status, tc.kind, tc.status)
			}
			msg := err.Error()
			for _, want := range []string{srv.URL, fmt.Sprintf("HTTP %d", tc.status), tc.message} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
		})
	}
}

func TestRequestErrorsMakeNoCall(t *testing.T) {
	cases := []struct {
		name string
		req  models.Request
	}{
		{"no messages", models.Request{}},
		{"unknown role", models.Request{Messages: []schemas.Message{{Role: "robot", Content: "x"}}}},
		{"tool without id", models.Request{Messages: []schemas.Message{{Role: "tool", Content: "x"}}}},
		{"tool without name", models.Request{Messages: []schemas.Message{{Role: "user", Content: "x"}}, Tools: []models.Tool{{}}}},
		{"owned extra", models.Request{Messages: []schemas.Message{{Role: "user", Content: "x"}}, Extra: map[string]any{"temperature": 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
			_, err := c.Chat(context.Background(), tc.req)
			if models.KindOf(err) != models.KindBadRequest || srv.Calls() != 0 {
				t.Fatalf("err %v calls %d, want bad_request and no call", err, srv.Calls())
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Setenv("WHALE_TEST_EMPTY_KEY", "")
	cases := []struct {
		name string
		cfg  models.Config
		want string
	}{
		{"no endpoints", models.Config{Model: "m"}, "no endpoints"},
		{"not a url", models.Config{Endpoints: []string{"localhost:8000"}, Model: "m"}, "base URL"},
		{"no model", models.Config{Endpoints: []string{"http://x/v1"}}, "no model"},
		{"owned extra", models.Config{Endpoints: []string{"http://x/v1"}, Model: "m", Extra: map[string]any{"top_k": 5}}, "top_k"},
		{"key env unset", models.Config{Endpoints: []string{"http://x/v1"}, Model: "m", APIKeyEnv: "WHALE_TEST_EMPTY_KEY"}, "WHALE_TEST_EMPTY_KEY"},
		{"negative", models.Config{Endpoints: []string{"http://x/v1"}, Model: "m", Concurrency: -1}, "negative"},
		{"password in url", models.Config{Endpoints: []string{"ftp://u:hunter22@x/v1"}, Model: "m"}, "REDACTED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := models.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter22") {
				t.Fatalf("error leaks a password: %v", err)
			}
		})
	}
}

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAPIKeyNeverLeaks(t *testing.T) {
	const key = "sk-whale-test-0123456789abcdef"
	t.Setenv("WHALE_TEST_API_KEY", key)
	// A server that echoes the Authorization header back, as some proxies
	// do in their error pages.
	echo := func(status int) modeltest.Handler {
		return func(r *modeltest.Request) modeltest.Reply {
			return modeltest.Reply{Fault: modeltest.FaultStatus, Status: status,
				Body: fmt.Sprintf(`{"error":{"message":"bad credentials %s"}}`, r.Header.Get("Authorization"))}
		}
	}
	cases := []struct {
		name string
		h    modeltest.Handler
		kind models.Kind
	}{
		{"401 echoing key", echo(401), models.KindAuth},
		{"500 echoing key, exhausted", echo(500), models.KindServerError},
		{"dropped connections", modeltest.Always(modeltest.Reply{Fault: modeltest.FaultDrop}), models.KindConnection},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, tc.h)
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}, APIKeyEnv: "WHALE_TEST_API_KEY", Logger: logger,
				Cooldown: models.CooldownPolicy{Failures: 1, Duration: time.Millisecond}})
			_, err := c.Chat(context.Background(), hello())
			if models.KindOf(err) != tc.kind {
				t.Fatalf("err %v, want kind %s", err, tc.kind)
			}
			if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+key {
				t.Fatalf("server saw Authorization %q, want the key as a bearer token", got)
			}
			var me *models.Error
			errors.As(err, &me)
			for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", me), me.Message, fmt.Sprint(me.Err), logs.String()} {
				if strings.Contains(s, key) {
					t.Fatalf("key leaked in %q", s)
				}
			}
			if tc.kind != models.KindConnection && !strings.Contains(err.Error(), "REDACTED") {
				t.Fatalf("echoed key not visibly redacted: %v", err)
			}
		})
	}
}

func TestNoKeyIsSentWithoutAPIKeyEnv(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai-should-not-be-sent")
	t.Setenv("OPENAI_ADMIN_KEY", "sk-admin-should-not-be-sent")
	t.Setenv("OPENAI_ORG_ID", "org-should-not-be-sent")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
	c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
	if _, err := c.Chat(context.Background(), hello()); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	for _, k := range []string{"Authorization", "OpenAI-Organization", "X-Leak"} {
		if v := h.Get(k); v != "" {
			t.Errorf("sent %s: %q; want none", k, v)
		}
	}
}

func TestBodyCarriesSamplingAndExtras(t *testing.T) {
	cases := []struct {
		name   string
		cfg    models.Config
		req    models.Request
		want   map[string]any // JSON-decoded values expected in the body
		absent []string
	}{
		{
			name: "config defaults and vendor extras",
			cfg: models.Config{
				Sampling: models.Sampling{Temperature: models.Ptr(1.0), TopP: models.Ptr(1.0), TopK: models.Ptr(20), MaxTokens: models.Ptr[int64](8192), Stop: []string{"</answer>"}},
				Extra: map[string]any{
					"chat_template_kwargs": map[string]any{"enable_thinking": false},
					"repetition_penalty":   1.05,
					"min_p":                0.0,
				},
			},
			want: map[string]any{
				"model": "test-model", "temperature": 1.0, "top_p": 1.0, "top_k": 20.0, "max_tokens": 8192.0,
				"stop":                 []any{"</answer>"},
				"chat_template_kwargs": map[string]any{"enable_thinking": false},
				"repetition_penalty":   1.05, "min_p": 0.0,
			},
			absent: []string{"seed", "tools", "stream"},
		},
		{
			name: "request overrides and seed",
			cfg: models.Config{Sampling: models.Sampling{Temperature: models.Ptr(1.0), TopK: models.Ptr(20), Seed: models.Ptr[int64](1)},
				Extra: map[string]any{"priority": 1, "min_p": 0.1}},
			req: models.Request{Sampling: models.Sampling{Temperature: models.Ptr(0.0), TopK: models.Ptr(-1)}, Seed: models.Ptr[int64](42),
				Extra: map[string]any{"priority": 3, "dotted.key": "x<&>"}},
			want:   map[string]any{"temperature": 0.0, "top_k": -1.0, "seed": 42.0, "priority": 3.0, "min_p": 0.1, "dotted.key": "x<&>"},
			absent: []string{"top_p", "max_tokens", "stop"},
		},
		{
			name:   "nothing set leaves it to the server",
			want:   map[string]any{"model": "test-model"},
			absent: []string{"temperature", "top_p", "top_k", "max_tokens", "seed", "stop"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
			cfg := tc.cfg
			cfg.Endpoints = []string{srv.URL}
			c := newClient(t, cfg)
			req := tc.req
			req.Messages = hello().Messages
			if _, err := c.Chat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			body := srv.Requests()[0].Body
			if n := bytes.Count(srv.Requests()[0].Raw, []byte(`"priority"`)); n > 1 {
				t.Errorf("key priority appears %d times in %s", n, srv.Requests()[0].Raw)
			}
			for k, v := range tc.want {
				if !reflect.DeepEqual(body[k], v) {
					t.Errorf("body[%q] = %#v, want %#v", k, body[k], v)
				}
			}
			for _, k := range tc.absent {
				if _, ok := body[k]; ok {
					t.Errorf("body has %q = %#v, want it absent", k, body[k])
				}
			}
		})
	}
}

func TestToolCallsRoundTrip(t *testing.T) {
	calls := []schemas.ToolCall{
		{ID: "call_a", Name: "search", Arguments: `{"query":"whale song"}`},
		{ID: "call_b", Name: "python", Arguments: `{"code":"print(1)"}`},
	}
	srv := modeltest.NewServer(t, modeltest.Script(
		modeltest.Reply{ToolCalls: calls},
		modeltest.Reply{Content: "<answer>blue whale</answer>"},
	))
	c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
	tools := []models.Tool{
		{Name: "search", Description: "search the corpus", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"}}},
		{Name: "python", Parameters: map[string]any{"type": "object"}},
	}
	msgs := []schemas.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "which whale sings?", Name: "asker"},
	}
	res, err := c.Chat(context.Background(), models.Request{Messages: msgs, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.ToolCalls, calls) || res.FinishReason != "tool_calls" || res.Content != "" {
		t.Fatalf("tool calls %+v finish %q content %q", res.ToolCalls, res.FinishReason, res.Content)
	}
	msgs = append(msgs, res.Message(),
		schemas.Message{Role: "tool", Content: "blue whales sing", ToolCallID: "call_a", Name: "search"},
		schemas.Message{Role: "tool", Content: "1", ToolCallID: "call_b"})
	res, err = c.Chat(context.Background(), models.Request{Messages: msgs, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "<answer>blue whale</answer>" || res.ToolCalls != nil || res.FinishReason != "stop" {
		t.Fatalf("second reply %+v", res)
	}
	reqs := srv.Requests()
	if !reflect.DeepEqual(reqs[1].Messages, msgs) {
		t.Fatalf("server saw messages\n%+v\nwant\n%+v", reqs[1].Messages, msgs)
	}
	if len(reqs[1].Tools) != 2 || reqs[1].Tools[0].Name != "search" || reqs[1].Tools[0].Description != "search the corpus" ||
		!reflect.DeepEqual(reqs[1].Tools[0].Parameters, tools[0].Parameters) {
		t.Fatalf("server saw tools %+v", reqs[1].Tools)
	}
	if tcs := reqs[1].Body["messages"].([]any)[2].(map[string]any); tcs["tool_calls"].([]any)[0].(map[string]any)["type"] != "function" {
		t.Fatalf("assistant tool call sent without type function: %+v", tcs)
	}
}

func TestResponseFields(t *testing.T) {
	cases := []struct {
		name  string
		reply modeltest.Reply
		check func(*models.Response) string
	}{
		{"usage reported", modeltest.Reply{Content: "a b", PromptTokens: 11, CompletionTokens: 7}, func(r *models.Response) string {
			if r.PromptTokens != 11 || r.CompletionTokens != 7 || r.UsageMissing {
				return fmt.Sprintf("usage %d/%d missing=%v", r.PromptTokens, r.CompletionTokens, r.UsageMissing)
			}
			return ""
		}},
		{"usage missing", modeltest.Reply{Content: "a b", NoUsage: true}, func(r *models.Response) string {
			if r.PromptTokens != 0 || r.CompletionTokens != 0 || !r.UsageMissing {
				return fmt.Sprintf("usage %d/%d missing=%v", r.PromptTokens, r.CompletionTokens, r.UsageMissing)
			}
			return ""
		}},
		{"served model id", modeltest.Reply{Content: "x", Model: "/ckpt/step-0003"}, func(r *models.Response) string {
			if r.Model != "/ckpt/step-0003" {
				return "model " + r.Model
			}
			return ""
		}},
		{"reasoning split out", modeltest.Reply{Content: "42", Reasoning: "6*7"}, func(r *models.Response) string {
			if r.Reasoning != "6*7" || r.Content != "42" {
				return fmt.Sprintf("reasoning %q content %q", r.Reasoning, r.Content)
			}
			return ""
		}},
		{"length finish", modeltest.Reply{Content: "abc", FinishReason: "length"}, func(r *models.Response) string {
			if r.FinishReason != "length" {
				return "finish " + r.FinishReason
			}
			return ""
		}},
		{"tool call without id", modeltest.Reply{ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: "{}"}}}, func(r *models.Response) string {
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "call_0" {
				return fmt.Sprintf("tool calls %+v", r.ToolCalls)
			}
			return ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(tc.reply))
			c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
			res, err := c.Chat(context.Background(), hello())
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(res); msg != "" {
				t.Fatal(msg)
			}
			if res.Endpoint != srv.URL || res.Attempts != 1 || res.Latency <= 0 || res.AttemptLatency <= 0 || res.AttemptLatency > res.Latency {
				t.Fatalf("endpoint %s attempts %d latency %v attempt %v", res.Endpoint, res.Attempts, res.Latency, res.AttemptLatency)
			}
		})
	}
}

func TestLoadIsShared(t *testing.T) {
	slow := modeltest.Always(modeltest.Reply{Content: "x", Delay: 20 * time.Millisecond})
	a, b := modeltest.NewServer(t, slow), modeltest.NewServer(t, slow)
	c := newClient(t, models.Config{Endpoints: []string{a.URL, b.URL}, Concurrency: 4})
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if _, err := c.Chat(context.Background(), hello()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if a.Calls()+b.Calls() != n || a.Calls() < n/4 || b.Calls() < n/4 {
		t.Fatalf("calls a=%d b=%d, want %d shared roughly evenly", a.Calls(), b.Calls(), n)
	}
	if a.MaxInFlight() > 4 || b.MaxInFlight() > 4 {
		t.Fatalf("max in flight a=%d b=%d, want <= 4 each", a.MaxInFlight(), b.MaxInFlight())
	}
}

func TestSequentialCallsAlternate(t *testing.T) {
	ok := modeltest.Always(modeltest.Reply{Content: "x"})
	a, b := modeltest.NewServer(t, ok), modeltest.NewServer(t, ok)
	c := newClient(t, models.Config{Endpoints: []string{a.URL, b.URL}})
	for range 10 {
		if _, err := c.Chat(context.Background(), hello()); err != nil {
			t.Fatal(err)
		}
	}
	if a.Calls() != 5 || b.Calls() != 5 {
		t.Fatalf("ties should go round-robin: a=%d b=%d", a.Calls(), b.Calls())
	}
}

func TestDeadEndpointIsAvoided(t *testing.T) {
	cases := []struct {
		name string
		dead modeltest.Reply
	}{
		{"drops connections", modeltest.Reply{Fault: modeltest.FaultDrop}},
		{"answers 500", modeltest.Reply{Fault: modeltest.FaultServerError}},
		{"hangs past the timeout", modeltest.Reply{Delay: 10 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dead := modeltest.NewServer(t, modeltest.Always(tc.dead))
			good := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
			cool := models.CooldownPolicy{Failures: 2, Duration: time.Minute}
			c := newClient(t, models.Config{Endpoints: []string{dead.URL, good.URL}, Cooldown: cool, Timeout: 300 * time.Millisecond})
			const n = 20
			for i := range n {
				res, err := c.Chat(context.Background(), hello())
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if res.Endpoint != good.URL {
					t.Fatalf("call %d answered by %s", i, res.Endpoint)
				}
			}
			if dead.Calls() > cool.Failures {
				t.Fatalf("dead endpoint got %d calls, want at most %d before its cool-down", dead.Calls(), cool.Failures)
			}
		})
	}
}

func TestRefusedEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	c := newClient(t, models.Config{Endpoints: []string{"http://" + addr + "/v1"}})
	_, err = c.Chat(context.Background(), hello())
	var me *models.Error
	if !errors.As(err, &me) || me.Kind != models.KindConnection || me.Attempts != fastRetry.Attempts {
		t.Fatalf("err %v, want connection after %d attempts", err, fastRetry.Attempts)
	}
}

func TestConcurrencyPerEndpointIsBounded(t *testing.T) {
	cases := []struct {
		name        string
		endpoints   int
		concurrency int
		callers     int
	}{
		{"one endpoint", 1, 3, 30},
		{"two endpoints", 2, 2, 30},
		{"one slot", 1, 1, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var srvs []*modeltest.Server
			var urls []string
			for range tc.endpoints {
				s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x", Delay: 10 * time.Millisecond}))
				srvs, urls = append(srvs, s), append(urls, s.URL)
			}
			c := newClient(t, models.Config{Endpoints: urls, Concurrency: tc.concurrency})
			var wg sync.WaitGroup
			for range tc.callers {
				wg.Go(func() {
					if _, err := c.Chat(context.Background(), hello()); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for i, s := range srvs {
				if s.MaxInFlight() > tc.concurrency {
					t.Fatalf("endpoint %d had %d calls in flight, limit %d", i, s.MaxInFlight(), tc.concurrency)
				}
				// The limit must also be reached, or the test proves nothing.
				if s.MaxInFlight() < tc.concurrency {
					t.Fatalf("endpoint %d peaked at %d in flight, want the limit %d with %d callers", i, s.MaxInFlight(), tc.concurrency, tc.callers)
				}
			}
		})
	}
}

func TestPerCallTimeout(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x", Delay: 2 * time.Second}))
	c := newClient(t, models.Config{Endpoints: []string{srv.URL}, Timeout: 50 * time.Millisecond,
		Retry: models.RetryPolicy{Attempts: 2, Base: time.Millisecond, Max: time.Millisecond}})
	start := time.Now()
	_, err := c.Chat(context.Background(), hello())
	el := time.Since(start)
	var me *models.Error
	if !errors.As(err, &me) || me.Kind != models.KindTimeout || me.Attempts != 2 {
		t.Fatalf("err %v, want timeout after 2 attempts", err)
	}
	if el > time.Second {
		t.Fatalf("took %v; the per-call timeout did not cut the attempts", el)
	}
}

func TestCancellation(t *testing.T) {
	cases := []struct {
		name  string
		reply modeltest.Reply
		cfg   models.Config
		// block occupies the only slot before the measured call.
		block bool
	}{
		{"waiting for the server", modeltest.Reply{Delay: 10 * time.Second}, models.Config{}, false},
		{"waiting between retries", modeltest.Reply{Fault: modeltest.FaultServerError},
			models.Config{Retry: models.RetryPolicy{Attempts: 5, Base: 10 * time.Second, Max: 10 * time.Second}}, false},
		{"waiting for Retry-After", modeltest.Reply{Fault: modeltest.FaultRateLimit, RetryAfter: "30"},
			models.Config{Retry: models.RetryPolicy{Attempts: 5, Base: time.Millisecond, Max: time.Millisecond}}, false},
		{"queued for a slot", modeltest.Reply{Delay: 10 * time.Second}, models.Config{Concurrency: 1}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(tc.reply))
			cfg := tc.cfg
			cfg.Endpoints = []string{srv.URL}
			c := newClient(t, cfg)
			if tc.block {
				bctx, bcancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); _, _ = c.Chat(bctx, hello()) }()
				t.Cleanup(func() { bcancel(); <-done })
				for srv.Calls() == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			_, err := c.Chat(ctx, hello())
			el := time.Since(start)
			if models.KindOf(err) != models.KindCanceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want canceled", err)
			}
			if el > time.Second {
				t.Fatalf("Chat returned %v after cancel", el)
			}
			if tc.block && srv.Calls() != 1 {
				t.Fatalf("queued call reached the server (%d calls)", srv.Calls())
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Run("one endpoint waits", func(t *testing.T) {
		srv := modeltest.NewServer(t, modeltest.Script(modeltest.Reply{Fault: modeltest.FaultRateLimit, RetryAfter: "1"}, modeltest.Reply{Content: "x"}))
		c := newClient(t, models.Config{Endpoints: []string{srv.URL}})
		start := time.Now()
		res, err := c.Chat(context.Background(), hello())
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 900*time.Millisecond || res.Attempts != 2 {
			t.Fatalf("retried after %v with %d attempts, want >= 1s (Retry-After) and 2", el, res.Attempts)
		}
	})
	t.Run("another endpoint takes over", func(t *testing.T) {
		limited := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Fault: modeltest.FaultRateLimit, RetryAfter: "60"}))
		free := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
		c := newClient(t, models.Config{Endpoints: []string{limited.URL, free.URL}})
		start := time.Now()
		for range 6 {
			if _, err := c.Chat(context.Background(), hello()); err != nil {
				t.Fatal(err)
			}
		}
		if el := time.Since(start); el > 2*time.Second || limited.Calls() != 1 {
			t.Fatalf("took %v, limited endpoint got %d calls; want fast and 1", el, limited.Calls())
		}
	})
}

func TestBaseURLForms(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
	for _, base := range []string{srv.URL, srv.URL + "/"} {
		c := newClient(t, models.Config{Endpoints: []string{base}})
		if _, err := c.Chat(context.Background(), hello()); err != nil {
			t.Fatalf("base %s: %v", base, err)
		}
	}
	for _, r := range srv.Requests() {
		if r.Path != "/v1/chat/completions" {
			t.Fatalf("path %s", r.Path)
		}
	}
}

// A secret in an endpoint's query is not in the error of a failed call,
// though net/http quotes the request URL in its own.
func TestEndpointQueryNeverLeaks(t *testing.T) {
	const secret = "LEAKs3cr3tQuery"
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Fault: modeltest.FaultDrop}))
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, models.Config{Endpoints: []string{srv.URL + "?api_key=" + secret}, Logger: logger,
		Cooldown: models.CooldownPolicy{Failures: 1, Duration: time.Millisecond}})
	_, err := c.Chat(context.Background(), hello())
	if models.KindOf(err) != models.KindConnection {
		t.Fatalf("err %v, want a connection error", err)
	}
	var me *models.Error
	errors.As(err, &me)
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), me.Message, fmt.Sprint(me.Err), logs.String()} {
		if strings.Contains(s, secret) {
			t.Fatalf("the endpoint's secret leaked in %q", s)
		}
	}
	if !strings.Contains(me.Message, "api_key=REDACTED") {
		t.Errorf("message %q does not show the redacted URL", me.Message)
	}
}
