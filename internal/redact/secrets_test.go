package redact

import (
	"strings"
	"testing"
)

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"ANTHROPIC_API_KEY": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_REGION": true, "AZURE_STORAGE_ACCOUNT": true,
		"GOOGLE_APPLICATION_CREDENTIALS": true, "HF_TOKEN": true, "GITHUB_TOKEN": true, "DB_PASSWORD": true,
		"MY_SECRET_THING": true, "CLIENT_SECRET": true, "GH_PAT": true, "SSH_PRIVATE_KEY": true, "OPENAI_APIKEY": true,
		"CLAUDE_CODE_OAUTH_TOKEN": true, "BASIC_AUTH": true, "openai_api_key": true, "SIGNING_KEY": true,
		"PATH": false, "HOME": false, "LANG": false, "PWD": false, "KEYBOARD_LAYOUT": false, "GIT_AUTHOR_NAME": false,
		"WHALE_ROOT": false, "TOKENIZERS_PARALLELISM": true,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSecrets(t *testing.T) {
	sc := Secrets([]string{
		"ANTHROPIC_API_KEY=sk-ant-0123456789",
		"LONG_TOKEN=sk-ant-0123456789-and-more", // holds the other one
		"SHORT_TOKEN=abc1234",                   // under MinSecretLen: would blank out words
		"PATH=/usr/bin:/bin:/usr/local/bin",     // not a secret by its name
		"DB_PASSWORD=",
		"NOEQUALS",
	})
	in := "key sk-ant-0123456789-and-more and sk-ant-0123456789; abc1234 in /usr/bin:/bin:/usr/local/bin at http://u:pw@h/x"
	got := sc.Text(in)
	want := "key REDACTED and REDACTED; abc1234 in /usr/bin:/bin:/usr/local/bin at http://REDACTED@h/x"
	if got != want {
		t.Errorf("Text:\n got %q\nwant %q", got, want)
	}
	if !sc.Holds("x sk-ant-0123456789 y") || sc.Holds("abc1234") || sc.Holds(got) {
		t.Error("Holds")
	}
	if sc.Longest() != len("sk-ant-0123456789-and-more") {
		t.Errorf("Longest = %d", sc.Longest())
	}
	var none *Scrubber
	if none.Text("http://u:pw@h/") != "http://REDACTED@h/" || none.Holds("x") || none.Longest() != 0 {
		t.Error("a nil Scrubber is Text")
	}
	if s := Secrets(nil); s.Longest() != 0 || s.Text("plain") != "plain" {
		t.Error("empty environment")
	}
	// A variable named as a key holder is secret whatever its name.
	env := []string{"LLM_BEARER=bearer-0123456789"}
	if got := Secrets(env, "LLM_BEARER").Text("auth bearer-0123456789 x"); got != "auth REDACTED x" {
		t.Errorf("a named key variable: %q", got)
	}
	if got := Secrets(env, "OTHER").Text("auth bearer-0123456789 x"); got != "auth bearer-0123456789 x" {
		t.Errorf("an unnamed, harmless-looking variable: %q", got)
	}
	if strings.Contains(Secrets([]string{"X_KEY=value=with=equals"}).Text("a value=with=equals b"), "value=with") {
		t.Error("a value with '=' is kept whole")
	}
}

func TestScrubberIndex(t *testing.T) {
	sc := Secrets([]string{"A_TOKEN=sk-0123456789", "B_TOKEN=sk-0123456789-longer", "C_TOKEN=zz-abcdefgh"})
	for _, c := range []struct {
		in       string
		start, n int
	}{
		{"nothing here", -1, 0},
		{"x zz-abcdefgh y sk-0123456789", 2, 11},
		{"..sk-0123456789-longer", 2, len("sk-0123456789-longer")}, // the longest value at the same place
		{"sk-0123456789 then zz-abcdefgh", 0, len("sk-0123456789")},
	} {
		if s, n := sc.Index(c.in); s != c.start || n != c.n {
			t.Errorf("Index(%q) = %d, %d; want %d, %d", c.in, s, n, c.start, c.n)
		}
	}
	var none *Scrubber
	if s, n := none.Index("sk-0123456789"); s != -1 || n != 0 {
		t.Error("a nil Scrubber finds nothing")
	}
}
