package models

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestBackoffIsFullJitterUnderCap(t *testing.T) {
	cases := []struct {
		name     string
		base     time.Duration
		max      time.Duration
		n        int
		wantCeil time.Duration
	}{
		{"first retry", 100 * time.Millisecond, 10 * time.Second, 0, 100 * time.Millisecond},
		{"third retry doubles twice", 100 * time.Millisecond, 10 * time.Second, 2, 400 * time.Millisecond},
		{"capped", 100 * time.Millisecond, time.Second, 10, time.Second},
		{"huge exponent does not overflow", time.Second, 5 * time.Second, 200, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{cfg: Config{Retry: RetryPolicy{Base: tc.base, Max: tc.max}}}
			// The largest draw shows the ceiling, the smallest that the
			// jitter reaches down to zero.
			c.rnd = func(n int64) int64 { return n - 1 }
			if got := c.backoff(tc.n); got != tc.wantCeil {
				t.Fatalf("ceiling %v, want %v", got, tc.wantCeil)
			}
			c.rnd = func(int64) int64 { return 0 }
			if got := c.backoff(tc.n); got != 0 {
				t.Fatalf("floor %v, want 0", got)
			}
		})
	}
}

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

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"0", 0},
		{"1.5", 1500 * time.Millisecond},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"1e300", 0},
	}
	for _, tc := range cases {
		h := http.Header{}
		if tc.v != "" {
			h.Set("Retry-After", tc.v)
		}
		if got := parseRetryAfter(h, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
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
			func(r *Response) bool { return r.Reasoning == "2+2" }},
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
	w := wireRequest{Model: "m", Temperature: Ptr(0.0), Seed: Ptr[int64](0)}
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
		// The reference: encoding/json, read the same way.
		var wc wireCompletion
		want, werr := (*Response)(nil), json.Unmarshal(body, &wc)
		if werr == nil {
			want, werr = fromWire(&wc)
		}
		// Whatever encoding/json reads, this reads alike. It may accept
		// more: goccy/go-json skips the values of keys it does not read
		// without checking them (a truncated body still fails, see
		// TestDecodeCompletionRejectsTruncation).
		if werr == nil && (err != nil || !reflect.DeepEqual(r, want)) {
			t.Fatalf("decoded %+v (error %v), encoding/json %+v", r, err, want)
		}
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
			}
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "5", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "x", "-1", "NaN", "Inf"} {
		f.Add(s)
	}
	now := time.Unix(1e9, 0)
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Retry-After", v)
		if d := parseRetryAfter(h, now); d < 0 {
			t.Fatalf("negative wait %v for %q", d, v)
		}
	})
}
