package models

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// TestRequestBody checks the body the client sends for each shape of
// message, tool and sampling field against the JSON vLLM's and OpenAI's
// schemas expect.
func TestRequestBody(t *testing.T) {
	zero, zero64 := 0, int64(0)
	temp := 0.0
	cases := []struct {
		name string
		cfg  Config
		req  Request
		want string
	}{
		{"user", Config{}, Request{Messages: []schemas.Message{{Role: "user", Content: "a<b> & \"c\""}}},
			`{"model":"m","messages":[{"role":"user","content":"a\u003cb\u003e \u0026 \"c\""}]}`},
		{"empty content is sent", Config{}, Request{Messages: []schemas.Message{{Role: "system"}, {Role: "assistant"}}},
			`{"model":"m","messages":[{"role":"system","content":""},{"role":"assistant","content":""}]}`},
		{"assistant calling tools has no content", Config{}, Request{Messages: []schemas.Message{
			{Role: "assistant", Reasoning: "think", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"x"}`}}},
			{Role: "tool", Name: "search", ToolCallID: "c1", Content: "r"},
			{Role: "assistant", Content: "a", Reasoning: "r"}}},
			`{"model":"m","messages":[` +
				`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"x\"}"}}],"reasoning_content":"think","reasoning":"think"},` +
				`{"role":"tool","content":"r","name":"search","tool_call_id":"c1"},` +
				`{"role":"assistant","content":"a","reasoning_content":"r","reasoning":"r"}]}`},
		{"a tool call whose id a harness left out is sent with an empty id", Config{}, Request{Messages: []schemas.Message{
			{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: "{}"}}}}},
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
		{"tools and a mode", Config{}, Request{Messages: []schemas.Message{{Role: "user"}},
			Tools: []Tool{{Name: "search", Description: "d", Parameters: map[string]any{"type": "object"}}}, ToolChoice: "required"},
			`{"model":"m","messages":[{"role":"user","content":""}],"tools":[{"type":"function","function":{"name":"search","description":"d","parameters":{"type":"object"}}}],"tool_choice":"required"}`},
		{"a named tool", Config{}, Request{Messages: []schemas.Message{{Role: "user"}}, Tools: []Tool{{Name: "search"}}, ToolChoice: "search"},
			`{"model":"m","messages":[{"role":"user","content":""}],"tools":[{"type":"function","function":{"name":"search"}}],"tool_choice":{"function":{"name":"search"},"type":"function"}}`},
		{"tool choice without tools is not sent", Config{}, Request{Messages: []schemas.Message{{Role: "user"}}, ToolChoice: "auto"},
			`{"model":"m","messages":[{"role":"user","content":""}]}`},
		{"zero sampling values are sent", Config{Sampling: Sampling{Temperature: &temp, TopK: &zero, MaxTokens: &zero64, Stop: []string{"</a>"}}},
			Request{Messages: []schemas.Message{{Role: "user"}}, Seed: &zero64},
			`{"model":"m","messages":[{"role":"user","content":""}],"temperature":0,"top_k":0,"max_tokens":0,"seed":0,"stop":["\u003c/a\u003e"]}`},
		{"extras after the fields, in key order", Config{Extra: map[string]any{"min_p": 0.1, "chat_template_kwargs": map[string]any{"enable_thinking": false}}},
			Request{Messages: []schemas.Message{{Role: "user"}}, Extra: map[string]any{"min_p": 0.2}},
			`{"model":"m","messages":[{"role":"user","content":""}],"chat_template_kwargs":{"enable_thinking":false},"min_p":0.2}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Endpoints, cfg.Model = []string{"http://127.0.0.1:1/v1"}, "m"
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.build(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("body\n%s\nwant\n%s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("body is not JSON: %s", got)
			}
		})
	}
}

func TestRequestBodyErrors(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name string
		cfg  Config
		msgs []schemas.Message
		want string
	}{
		{"unknown role", Config{}, []schemas.Message{{Role: "user"}, {Role: "robot"}}, `message 1: unknown role "robot"`},
		{"tool without id", Config{}, []schemas.Message{{Role: "tool", Content: "x"}}, "message 0: tool message without tool_call_id"},
		{"user with tool calls", Config{}, []schemas.Message{{Role: "user", ToolCalls: []schemas.ToolCall{{Name: "x"}}}}, "message 0: role user cannot carry tool calls"},
		{"NaN temperature", Config{Sampling: Sampling{Temperature: &nan}}, []schemas.Message{{Role: "user"}}, "unsupported value: NaN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Endpoints, cfg.Model = []string{"http://127.0.0.1:1/v1"}, "m"
			c, err := New(cfg)
			if err != nil {
				// Config validation may refuse it first: that is as good.
				if !strings.Contains(err.Error(), "NaN") && !strings.Contains(err.Error(), "temperature") {
					t.Fatal(err)
				}
				return
			}
			_, err = c.build(Request{Messages: tc.msgs})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
