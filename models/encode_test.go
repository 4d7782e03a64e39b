package models

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// marshalWire is the reference: toWire and encoding/json.
func marshalWire(w wireRequest, msgs []schemas.Message) ([]byte, error) {
	var err error
	if w.Messages, err = toWire(msgs); err != nil {
		return nil, err
	}
	return json.Marshal(&w)
}

func allBytes() string {
	var b strings.Builder
	for i := range 256 {
		b.WriteByte(byte(i))
	}
	return b.String()
}

func TestAppendRequestMatchesEncodingJSON(t *testing.T) {
	tricky := []string{"", "plain", `q"uote\back`, "<answer>42</answer> & more", "tab\tnl\ncr\rbs\bff\f\x00\x1f\x7f",
		"é中文🐳", "\u2028\u2029", "bad \xff\xfe utf8 \xe2\x82", allBytes()}
	var msgs []schemas.Message
	for _, s := range tricky {
		msgs = append(msgs, schemas.Message{Role: "user", Content: s})
	}
	msgs = append(msgs,
		schemas.Message{Role: "system", Content: "s", Name: "n\x01"},
		schemas.Message{Role: "developer", Content: "d"},
		schemas.Message{Role: "assistant", Content: "", ToolCalls: []schemas.ToolCall{{ID: "c<1>", Name: "search", Arguments: `{"q":"x"}`}, {Name: "n"}}},
		schemas.Message{Role: "assistant", Content: "text too", ToolCalls: []schemas.ToolCall{{ID: "c2", Name: "calc", Arguments: ""}}},
		schemas.Message{Role: "assistant", Content: ""},
		schemas.Message{Role: "assistant", Content: "", Reasoning: "think <first>", ToolCalls: []schemas.ToolCall{{ID: "c3", Name: "search", Arguments: "{}"}}},
		schemas.Message{Role: "assistant", Content: "a", Reasoning: "r"},
		schemas.Message{Role: "tool", Content: "r", Name: "search", ToolCallID: "c<1>"},
	)
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	i64 := func(v int64) *int64 { return &v }
	cases := []struct {
		name string
		w    wireRequest
		msgs []schemas.Message
	}{
		{"bare", wireRequest{Model: "m"}, msgs[:1]},
		{"all messages", wireRequest{Model: "<m>"}, msgs},
		{"sampling", wireRequest{Model: "m", Temperature: f(0.7), TopP: f(1), TopK: i(-1), MaxTokens: i64(8192), Seed: i64(-5), Stop: []string{"</answer>", "\n\n"}}, msgs[:2]},
		{"zero sampling", wireRequest{Model: "m", Temperature: f(0), TopP: f(0), TopK: i(0), MaxTokens: i64(0), Seed: i64(0)}, msgs[:1]},
		{"float formats", wireRequest{Model: "m", Temperature: f(1e-7), TopP: f(1e21)}, msgs[:1]},
		{"float formats 2", wireRequest{Model: "m", Temperature: f(-3.25e-10), TopP: f(123456789.125)}, msgs[:1]},
		{"tools", wireRequest{Model: "m", Tools: []wireTool{{Type: "function", Function: wireToolFunction{Name: "search", Parameters: map[string]any{"type": "object"}}}}}, msgs[:1]},
		{"tool choice mode", wireRequest{Model: "m", Tools: []wireTool{{Type: "function", Function: wireToolFunction{Name: "search"}}}, ToolChoice: toolChoice("required")}, msgs[:1]},
		{"tool choice named", wireRequest{Model: "m", Tools: []wireTool{{Type: "function", Function: wireToolFunction{Name: "search"}}}, ToolChoice: toolChoice("search")}, msgs[:1]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := marshalWire(tc.w, tc.msgs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendRequest(nil, &tc.w, tc.msgs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("appendRequest:\n%s\nencoding/json:\n%s", got, want)
			}
		})
	}
}

func TestAppendRequestErrors(t *testing.T) {
	cases := []struct {
		name string
		w    wireRequest
		msgs []schemas.Message
	}{
		{"unknown role", wireRequest{Model: "m"}, []schemas.Message{{Role: "user"}, {Role: "robot"}}},
		{"tool without id", wireRequest{Model: "m"}, []schemas.Message{{Role: "tool", Content: "x"}}},
		{"user with tool calls", wireRequest{Model: "m"}, []schemas.Message{{Role: "user", ToolCalls: []schemas.ToolCall{{Name: "x"}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, want := marshalWire(tc.w, tc.msgs)
			_, got := appendRequest(nil, &tc.w, tc.msgs)
			if want == nil || got == nil || got.Error() != want.Error() {
				t.Errorf("error %v, want %v", got, want)
			}
		})
	}
	nan := math.NaN()
	if _, err := appendRequest(nil, &wireRequest{Model: "m", Temperature: &nan}, []schemas.Message{{Role: "user"}}); err != errNotFinite {
		t.Errorf("NaN temperature: %v", err)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a<b>&c", "\x00\xff", "\u2028", "é", allBytes()} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}
