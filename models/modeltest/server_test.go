package modeltest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
)

const body = `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a "},{"type":"text","text":"b"}]},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
	`{"role":"tool","content":"r","tool_call_id":"c1"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}],"top_k":20}`

func post(t *testing.T, s *modeltest.Server, b string) (*http.Response, []byte, error) {
	t.Helper()
	res, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res, data, err
}

func TestRecordsRequests(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "ok"}))
	if _, _, err := post(t, s, body); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || s.Calls() != 1 {
		t.Fatalf("%d requests, %d calls", len(reqs), s.Calls())
	}
	r := reqs[0]
	if r.Call != 1 || r.Model != "m" || r.Body["top_k"] != 20.0 || string(r.Raw) != body {
		t.Fatalf("recorded %+v", r)
	}
	if len(r.Messages) != 4 || r.Messages[1].Content != "a b" || r.Messages[2].ToolCalls[0].Name != "f" || r.Messages[3].ToolCallID != "c1" {
		t.Fatalf("messages %+v", r.Messages)
	}
	if len(r.Tools) != 1 || r.Tools[0].Description != "d" || r.Tools[0].Parameters["type"] != "object" {
		t.Fatalf("tools %+v", r.Tools)
	}
}

func TestRecordOffKeepsCountingButNotBodies(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "ok"}))
	steps := []struct {
		record     bool
		wantReqs   int
		wantCalls  int
		wantLastNo int
	}{
		{true, 1, 1, 1},
		{false, 1, 2, 1},
		{false, 1, 3, 1},
		{true, 2, 4, 4},
	}
	for i, st := range steps {
		s.Record(st.record)
		if _, _, err := post(t, s, body); err != nil {
			t.Fatal(err)
		}
		reqs := s.Requests()
		if len(reqs) != st.wantReqs || s.Calls() != st.wantCalls || reqs[len(reqs)-1].Call != st.wantLastNo {
			t.Fatalf("step %d: %d requests (last call %d), %d calls; want %d, %d, %d",
				i, len(reqs), reqs[len(reqs)-1].Call, s.Calls(), st.wantReqs, st.wantLastNo, st.wantCalls)
		}
	}
}

func TestScriptRepeatsLastReply(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Script(modeltest.Reply{Content: "one"}, modeltest.Reply{Content: "two"}))
	var got []string
	for range 3 {
		_, data, err := post(t, s, body)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Choices []struct {
				Message struct{ Content string }
			}
		}
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c.Choices[0].Message.Content)
	}
	if strings.Join(got, ",") != "one,two,two" {
		t.Fatalf("replies %v", got)
	}
}

func TestFaults(t *testing.T) {
	cases := []struct {
		name       string
		reply      modeltest.Reply
		status     int
		retryAfter string
		transport  bool // the client sees a transport error (no status, or a broken body)
		validJSON  bool
	}{
		{"ok", modeltest.Reply{Content: "x"}, 200, "", false, true},
		{"429", modeltest.Reply{Fault: modeltest.FaultRateLimit, RetryAfter: "3"}, 429, "3", false, true},
		{"500", modeltest.Reply{Fault: modeltest.FaultServerError}, 500, "", false, true},
		{"503", modeltest.Reply{Fault: modeltest.FaultUnavailable, RetryAfter: "1"}, 503, "1", false, true},
		{"418 raw body", modeltest.Reply{Fault: modeltest.FaultStatus, Status: 418, Body: `teapot`}, 418, "", false, false},
		{"drop", modeltest.Reply{Fault: modeltest.FaultDrop}, 0, "", true, false},
		{"drop mid body", modeltest.Reply{Fault: modeltest.FaultDropMidBody}, 200, "", true, false},
		{"malformed", modeltest.Reply{Fault: modeltest.FaultMalformed}, 200, "", false, false},
		{"truncated", modeltest.Reply{Fault: modeltest.FaultTruncated}, 200, "", false, false},
		{"empty choices", modeltest.Reply{Fault: modeltest.FaultEmptyChoices}, 200, "", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := modeltest.NewServer(t, modeltest.Always(tc.reply))
			res, data, err := post(t, s, body)
			if (err != nil) != tc.transport {
				t.Fatalf("transport error %v, want one: %v", err, tc.transport)
			}
			if res != nil && res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if res != nil && res.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", res.Header.Get("Retry-After"), tc.retryAfter)
			}
			if !tc.transport && json.Valid(data) != tc.validJSON {
				t.Fatalf("body valid JSON = %v, want %v: %s", json.Valid(data), tc.validJSON, data)
			}
			if s.Calls() != 1 {
				t.Fatalf("%d calls recorded", s.Calls())
			}
		})
	}
}

func TestDelayAndMaxInFlight(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x", Delay: 50 * time.Millisecond}))
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			if _, _, err := post(t, s, body); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("replies came after %v, before the delay", el)
	}
	if s.MaxInFlight() != 4 {
		t.Fatalf("max in flight %d, want 4", s.MaxInFlight())
	}
}

// TestSlotsBoundAndQueue: 3×4 calls on 4 slots of 50 ms are all answered
// (queued, not rejected), never more than 4 at once, and in at least three
// rounds of the latency.
func TestSlotsBoundAndQueue(t *testing.T) {
	const slots, rounds, latency = 4, 3, 50 * time.Millisecond
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x", Delay: latency}))
	s.SetSlots(slots)
	var wg sync.WaitGroup
	start := time.Now()
	for range slots * rounds {
		wg.Go(func() {
			res, _, err := post(t, s, body)
			if err != nil {
				t.Error(err)
				return
			}
			if res.StatusCode != 200 {
				t.Errorf("status %d", res.StatusCode)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if s.MaxRunning() > slots {
		t.Fatalf("%d calls ran at once on %d slots", s.MaxRunning(), slots)
	}
	if el < rounds*latency {
		t.Fatalf("%d calls on %d slots of %v took %v, under %v", slots*rounds, slots, latency, el, rounds*latency)
	}
	if s.Calls() != slots*rounds {
		t.Fatalf("%d calls, want %d", s.Calls(), slots*rounds)
	}
	if s.Held() < slots*rounds*latency {
		t.Fatalf("slots held %v in all, under %v", s.Held(), slots*rounds*latency)
	}
	t.Logf("%d calls on %d slots of %v: %v; at most %d in flight, %d running", slots*rounds, slots, latency, el, s.MaxInFlight(), s.MaxRunning())
}

func TestRejectsNonChatBodies(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x"}))
	for _, b := range []string{`not json`, `{"model":"m"}`, `{"messages":[{"role":"user","content":5}]}`} {
		res, _, err := post(t, s, b)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 400 {
			t.Errorf("body %q: status %d, want 400", b, res.StatusCode)
		}
	}
	res, err := http.Get(s.URL + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("unknown route: %d", res.StatusCode)
	}
}

func TestCloseAbandonsDelayedReplies(t *testing.T) {
	s := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "x", Delay: time.Hour}))
	errc := make(chan error, 1)
	go func() { _, _, err := post(t, s, body); errc <- err }()
	for s.Calls() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	s.Close()
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Close took %v", el)
	}
	if err := <-errc; err == nil {
		t.Fatal("a reply came from a closed server")
	}
}

// TestReplyShapes: scripted replies come back in vLLM's chat.completion
// shape, the malformed ones as scripted.
func TestReplyShapes(t *testing.T) {
	cases := []struct {
		name  string
		reply modeltest.Reply
		want  string // the choice, as JSON
	}{
		{"text", modeltest.Reply{Content: "hi"},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"hi","role":"assistant","tool_calls":[]},"stop_reason":null}`},
		{"stop string", modeltest.Reply{Content: "hi", StopReason: "Observation:"},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"hi","role":"assistant","tool_calls":[]},"stop_reason":"Observation:"}`},
		{"stop token id", modeltest.Reply{Content: "hi", StopReason: 151645},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"hi","role":"assistant","tool_calls":[]},"stop_reason":151645}`},
		{"tool call", modeltest.Reply{ToolCalls: []modeltest.ToolCall{{ID: "chatcmpl-tool-1", Name: "f", Arguments: `{"x":1}`}}},
			`{"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"x\":1}","name":"f"},"id":"chatcmpl-tool-1","type":"function"}]},"stop_reason":null}`},
		{"text and a call without id, arguments not JSON, unknown tool", modeltest.Reply{Content: "let me see", ToolCalls: []modeltest.ToolCall{{Name: "nope", Arguments: `{"x":`}}},
			`{"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":"let me see","role":"assistant","tool_calls":[{"function":{"arguments":"{\"x\":","name":"nope"},"type":"function"}]},"stop_reason":null}`},
		{"raw tool calls", modeltest.Reply{RawToolCalls: `[{"id":"a","function":{"name":"f","arguments":{"x":1}}}]`, FinishReason: "stop"},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":null,"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{"x":1}}}]},"stop_reason":null}`},
		{"raw tool calls not a list", modeltest.Reply{RawToolCalls: `"oops"`},
			`{"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":null,"role":"assistant","tool_calls":"oops"},"stop_reason":null}`},
		{"reasoning_content", modeltest.Reply{Content: "42", Reasoning: "6*7"},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"42","reasoning_content":"6*7","role":"assistant","tool_calls":[]},"stop_reason":null}`},
		{"reasoning under the newer key", modeltest.Reply{Content: "42", Reasoning: "6*7", ReasoningField: "reasoning"},
			`{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"42","reasoning":"6*7","role":"assistant","tool_calls":[]},"stop_reason":null}`},
		{"length", modeltest.Reply{Content: "ab", FinishReason: "length"},
			`{"finish_reason":"length","index":0,"logprobs":null,"message":{"content":"ab","role":"assistant","tool_calls":[]},"stop_reason":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := modeltest.NewServer(t, modeltest.Always(tc.reply))
			res, data, err := post(t, s, body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 200 {
				t.Fatalf("status %d: %s", res.StatusCode, data)
			}
			var c struct{ Choices []json.RawMessage }
			if err := json.Unmarshal(data, &c); err != nil || len(c.Choices) != 1 {
				t.Fatalf("body %s: %v", data, err)
			}
			// Compared as JSON values: key order is not part of the shape.
			var got, want any
			if err := json.Unmarshal(c.Choices[0], &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("choice\n%s\nwant\n%s", c.Choices[0], tc.want)
			}
		})
	}
}
