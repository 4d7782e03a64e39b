package local

import (
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func chat(user, assistant string) []schemas.Message {
	return []schemas.Message{{Role: "user", Content: user}, {Role: "assistant", Content: assistant}}
}

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msgs    []schemas.Message
		genProm bool
		want    string // rendered tokens
		mask    string // '1' where the assistant wrote the token
	}{
		{"user only", []schemas.Message{{Role: "user", Content: "hi"}}, true,
			"<|bos|><|user|>hi<|end|><|assistant|>", "000000"},
		{"turn", chat("a", "bc"), false,
			"<|bos|><|user|>a<|end|><|assistant|>bc<|end|>", "00000111"},
		{"system and tool", []schemas.Message{{Role: "system", Content: "s"}, {Role: "tool", Content: "t"}}, false,
			"<|bos|><|system|>s<|end|><|tool|>t<|end|>", "0000000"},
		{"tool call", []schemas.Message{{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: `{"x":1}`}}}}, false,
			`<|bos|><|assistant|><tool_call>{"name":"f","arguments":{"x":1}}</tool_call><|end|>`, "00" + strings.Repeat("1", len(`<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>`)+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, mask, err := Encode(tc.msgs, tc.genProm)
			if err != nil {
				t.Fatal(err)
			}
			var got, gotMask strings.Builder
			for i, id := range ids {
				got.WriteString(TokenName(id))
				if mask[i] {
					gotMask.WriteByte('1')
				} else {
					gotMask.WriteByte('0')
				}
			}
			if got.String() != tc.want {
				t.Errorf("tokens %q, want %q", got.String(), tc.want)
			}
			if gotMask.String() != tc.mask {
				t.Errorf("mask %s, want %s", gotMask.String(), tc.mask)
			}
		})
	}
	if _, _, err := Encode([]schemas.Message{{Role: "robot"}}, false); err == nil || !strings.Contains(err.Error(), "message 0") {
		t.Errorf("unknown role: err = %v", err)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
		stop bool
	}{
		{append(EncodeText("héllo"), TokEnd, 'x'), "héllo", true},
		{append(EncodeText("ab"), TokUser, 'c', TokEOS), "abc", true},
		{EncodeText("open"), "open", false},
	} {
		got, stop := Decode(tc.ids)
		if got != tc.want || stop != tc.stop {
			t.Errorf("Decode(%v) = %q, %v; want %q, %v", tc.ids, got, stop, tc.want, tc.stop)
		}
	}
}
