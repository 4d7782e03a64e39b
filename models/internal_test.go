package models

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/whalerun/whale/models/openai"
)

// fakeClock drives the balancer's cool-downs without sleeping.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

func newBalancer(n int, clock *fakeClock) *balancer {
	b := &balancer{cool: CooldownPolicy{Failures: 2, Duration: 10 * time.Second}, logger: slog.New(slog.DiscardHandler), now: clock.now}
	for i := range n {
		b.eps = append(b.eps, &endpoint{url: string(rune('a' + i)), sem: make(chan struct{}, 4)})
	}
	return b
}

func TestPick(t *testing.T) {
	type step struct {
		do   string // "pick", "pick-avoid-a", "release-a", "fail-a", "fail-a-ra", "ok-a", "wait"
		want string // endpoint picked, or "" when the pick must wait
	}
	cases := []struct {
		name  string
		n     int
		steps []step
	}{
		{"ties go round-robin", 3, []step{{"pick", "a"}, {"release-a", ""}, {"pick", "b"}, {"release-b", ""}, {"pick", "c"}, {"release-c", ""}, {"pick", "a"}}},
		{"fewest assigned wins", 2, []step{{"pick", "a"}, {"pick", "b"}, {"pick", "a"}, {"release-b", ""}, {"pick", "b"}, {"release-a", ""}, {"release-a", ""}, {"pick", "a"}}},
		{"the endpoint that just failed is avoided", 2, []step{{"pick-avoid-a", "b"}, {"pick-avoid-a", "b"}, {"pick-avoid-a", "b"}}},
		{"avoided endpoint is used when alone", 1, []step{{"pick-avoid-a", "a"}}},
		{"cooling endpoint is skipped", 2, []step{{"fail-a", ""}, {"fail-a", ""}, {"pick", "b"}, {"release-b", ""}, {"pick", "b"}, {"release-b", ""}, {"wait", ""}, {"pick", "a"}}},
		{"one failure does not cool", 2, []step{{"fail-a", ""}, {"pick", "a"}}},
		{"success resets the count", 2, []step{{"fail-a", ""}, {"ok-a", ""}, {"fail-a", ""}, {"pick", "a"}}},
		{"all cooling: still picked", 1, []step{{"fail-a", ""}, {"fail-a", ""}, {"pick", "a"}}},
		{"retry-after bars the endpoint", 1, []step{{"fail-a-ra", ""}, {"pick", ""}, {"wait", ""}, {"pick", "a"}}},
		{"retry-after sends calls elsewhere", 2, []step{{"fail-a-ra", ""}, {"pick", "b"}, {"pick", "b"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1000, 0)}
			b := newBalancer(tc.n, clock)
			byName := map[string]*endpoint{}
			for _, ep := range b.eps {
				byName[ep.url] = ep
			}
			for i, s := range tc.steps {
				switch {
				case s.do == "pick" || s.do == "pick-avoid-a":
					var avoid *endpoint
					if s.do == "pick-avoid-a" {
						avoid = byName["a"]
					}
					ep, wait := b.pick(avoid)
					got := ""
					if ep != nil {
						got = ep.url
						if s.do == "pick-avoid-a" {
							ep.assigned-- // not holding it
						}
					} else if wait <= 0 {
						t.Fatalf("step %d: no endpoint and no wait", i)
					}
					if got != s.want {
						t.Fatalf("step %d (%s): picked %q, want %q", i, s.do, got, s.want)
					}
				case strings.HasPrefix(s.do, "release-"):
					byName[s.do[len("release-"):]].assigned--
				case s.do == "fail-a":
					b.failed(byName["a"], KindServerError, 0)
				case s.do == "fail-a-ra":
					b.failed(byName["a"], KindRateLimited, 30*time.Second)
				case s.do == "ok-a":
					b.succeeded(byName["a"])
				case s.do == "wait":
					clock.t = clock.t.Add(time.Minute)
				default:
					t.Fatalf("bad step %q", s.do)
				}
			}
		})
	}
}

func TestAcquireWaitsForRetryAfterAndHonoursCancel(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	b := newBalancer(1, clock)
	b.failed(b.eps[0], KindRateLimited, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := b.acquire(ctx, nil); err == nil {
		t.Fatal("acquired an endpoint barred for an hour")
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("cancel took %v", el)
	}
	if b.eps[0].assigned != 0 {
		t.Fatalf("assigned %d after a failed acquire", b.eps[0].assigned)
	}
}

func TestKindForStatus(t *testing.T) {
	for code, want := range map[int]Kind{
		400: KindBadRequest, 401: KindAuth, 403: KindAuth, 404: KindBadRequest, 408: KindTimeout,
		422: KindBadRequest, 429: KindRateLimited, 500: KindServerError, 502: KindServerError,
		503: KindServerError, 501: KindBadRequest, 505: KindBadRequest,
	} {
		if got := kindForStatus(code); got != want {
			t.Errorf("kindForStatus(%d) = %s, want %s", code, got, want)
		}
	}
}

func TestClassifyTransport(t *testing.T) {
	post := func(err error) error { return &url.Error{Op: "Post", URL: "http://h/v1/chat/completions", Err: err} }
	cases := []struct {
		name                          string
		err                           error
		timedOut, response, bodyBroke bool
		want                          Kind
	}{
		{"refused", post(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), false, false, false, KindConnection},
		{"dropped", post(io.EOF), false, false, false, KindConnection},
		{"attempt timed out", post(context.DeadlineExceeded), true, false, false, KindTimeout},
		{"body cut off", io.ErrUnexpectedEOF, false, true, true, KindConnection},
		{"body not a completion", errNoChoices, false, true, false, KindMalformed},
		{"host does not resolve", post(&net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}), false, false, false, KindBadRequest},
	}
	for _, tc := range cases {
		if got := classifyTransport(tc.err, tc.timedOut, tc.response, tc.bodyBroke); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestServerMessage(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"error":{"message":"bad model","type":"x"}}`, "bad model"},
		{`{"error":"plain"}`, "plain"},
		{`{"object":"error","message":"too long","code":400}`, "too long"},
		{`{"detail":"field required"}`, "field required"},
		{`{"detail":[{"loc":["body"],"msg":"x"}]}`, `[{"loc":["body"],"msg":"x"}]`},
		{"  Bad Gateway\n", "Bad Gateway"},
		{strings.Repeat("x", 1000), strings.Repeat("x", 300) + "…"},
	}
	for _, tc := range cases {
		if got := serverMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("serverMessage(%.40q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestDecodeCompletion(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		wantErr bool
		check   func(*Response) bool
	}{
		{"plain", `{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, false,
			func(r *Response) bool {
				return r.Content == "hi" && r.Model == "m" && r.PromptTokens == 3 && r.CompletionTokens == 1 && !r.UsageMissing
			}},
		{"null content with tool call", `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`, false,
			func(r *Response) bool {
				return r.Content == "" && len(r.ToolCalls) == 1 && r.ToolCalls[0].Arguments == `{"a":1}` && r.UsageMissing
			}},
		{"arguments as an object", `{"choices":[{"message":{"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}}]}`, false,
			func(r *Response) bool {
				return len(r.ToolCalls) == 1 && r.ToolCalls[0].Arguments == `{"a":1}` && r.ToolCalls[0].ID == "call_0"
			}},
		{"custom tool calls skipped", `{"choices":[{"message":{"tool_calls":[{"id":"x","type":"custom"}]}}]}`, false,
			func(r *Response) bool { return len(r.ToolCalls) == 0 }},
		{"reasoning", `{"choices":[{"message":{"content":"4","reasoning":"2+2"}}]}`, false,
			func(r *Response) bool { return r.Reasoning == "2+2" && r.Message().Reasoning == "2+2" }},
		{"stop_reason a string", `{"choices":[{"message":{"content":"<search>q"},"finish_reason":"stop","stop_reason":"</search>"}]}`, false,
			func(r *Response) bool { return r.StopReason == "</search>" && r.Content == "<search>q" }},
		{"stop_reason a token id", `{"choices":[{"message":{"content":"x"},"finish_reason":"stop","stop_reason":151645}]}`, false,
			func(r *Response) bool { return r.StopReason == "" }},
		{"token ids", `{"prompt_token_ids":[1,2,3],"choices":[{"message":{"content":"x"},"token_ids":[4,5]}]}`, false,
			func(r *Response) bool {
				return len(r.PromptTokenIDs) == 3 && r.PromptTokenIDs[2] == 3 && len(r.TokenIDs) == 2 && r.TokenIDs[1] == 5
			}},
		{"no token ids", `{"choices":[{"message":{"content":"x"}}]}`, false,
			func(r *Response) bool { return r.PromptTokenIDs == nil && r.TokenIDs == nil }},
		{"stop_reason null", `{"choices":[{"message":{"content":"x"},"finish_reason":"stop","stop_reason":null}]}`, false,
			func(r *Response) bool { return r.StopReason == "" }},
		{"invalid UTF-8 becomes U+FFFD", "{\"choices\":[{\"message\":{\"content\":\"a\xffb\xc3\"}}]}", false,
			func(r *Response) bool { return r.Content == "a\uFFFDb\uFFFD" }},
		{"lone surrogate escape", `{"choices":[{"message":{"content":"x\ud800y"}}]}`, false,
			func(r *Response) bool { return r.Content == "x\uFFFDy" }},
		{"escapes", `{"choices":[{"message":{"content":"\"\u00e9\n\ud83d\ude00"}}]}`, false,
			func(r *Response) bool { return r.Content == "\"é\n😀" }},
		{"fields matched without case", `{"CHOICES":[{"Message":{"Content":"hi"}}]}`, false,
			func(r *Response) bool { return r.Content == "hi" }},
		{"no choices", `{"choices":[]}`, true, nil},
		{"null", `null`, true, nil},
		{"trailing garbage", `{"choices":[{"message":{"content":"hi"}}]} x`, true, nil},
		{"wrong shape", `{"choices":"x"}`, true, nil},
		{"not json", `<html>`, true, nil},
		{"empty", ``, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeCompletion([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && !tc.check(r) {
				t.Fatalf("unexpected %+v", r)
			}
		})
	}
}

func TestToWireKeepsZeroesAndOmitsUnset(t *testing.T) {
	w := openai.ChatRequest{Model: "m", Temperature: Ptr(0.0), Seed: Ptr[int64](0)}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["temperature"] != 0.0 || m["seed"] != 0.0 {
		t.Fatalf("zero values dropped: %s", b)
	}
	for _, k := range []string{"top_p", "top_k", "max_tokens", "stop", "tools"} {
		if _, ok := m[k]; ok {
			t.Fatalf("unset %s sent: %s", k, b)
		}
	}
}

func FuzzServerMessage(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"x"}}`, `{"message":"y"}`, `{"detail":1}`, `oops`, ``, `{"error":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := serverMessage(body)
		if len(got) > 300+len("…") {
			t.Fatalf("message not clipped: %d bytes", len(got))
		}
		if utf8.Valid(body) && !utf8.ValidString(strings.TrimSuffix(got, "…")) && len(got) < 300 {
			t.Fatalf("invalid UTF-8 from valid input")
		}
	})
}

// The client decodes from a pooled buffer that the next reply overwrites:
// nothing decoded may point into it.
func TestDecodeCompletionOwnsItsStrings(t *testing.T) {
	buf := []byte(`{"model":"m1","choices":[{"message":{"content":"first","reasoning_content":"why","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}`)
	r, err := decodeCompletion(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if r.Content != "first" || r.Reasoning != "why" || r.Model != "m1" || r.FinishReason != "stop" ||
		r.ToolCalls[0].ID != "c1" || r.ToolCalls[0].Name != "f" || r.ToolCalls[0].Arguments != "{}" {
		t.Fatalf("decoded strings changed with the buffer: %+v", r)
	}
}

// TestDecodeCompletionRejectsTruncation cuts real-shaped bodies at every
// byte: each cut must fail, so that a reply cut off in transit is retried
// rather than read as a shorter answer.
func TestDecodeCompletionRejectsTruncation(t *testing.T) {
	bodies := []string{
		`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is <answer>42</answer>.","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":80,"completion_tokens":10,"total_tokens":90},"prompt_logprobs":null}`,
		`{"model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"query\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"system_fingerprint":{"a":[1,2,{"b":"c"}]}}`,
	}
	for _, b := range bodies {
		if _, err := decodeCompletion([]byte(b)); err != nil {
			t.Fatalf("whole body: %v", err)
		}
		for n := range len(b) {
			if r, err := decodeCompletion([]byte(b[:n])); err == nil {
				t.Fatalf("body cut at %d of %d (%q) decoded as %+v", n, len(b), b[max(0, n-20):n], r)
			}
		}
	}
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`,
		`{"choices":[{"message":{"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}}]}`,
		`{"choices":[]}`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeCompletion(body)
		if err == nil && r == nil {
			t.Fatal("nil response without error")
		}
		if err != nil && r != nil {
			t.Fatal("response with error")
		}
		if err == nil {
			for _, tc := range r.ToolCalls {
				if tc.ID == "" {
					t.Fatal("tool call without id")
				}
				if !utf8.ValidString(tc.Arguments) || !utf8.ValidString(tc.Name) {
					t.Fatalf("invalid UTF-8 in a tool call: %+v", tc)
				}
			}
		}
	})
}
