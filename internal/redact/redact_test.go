package redact

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct {
		name     string
		in, want string   // want "" checks only gone
		gone     []string // must not be in the result
		why      string   // in Check's error; "" when Check must pass
	}{
		// Configuration stays, exactly as written.
		{"bucket config", "s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true",
			"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true", nil, ""},
		{"kmskeyid", "s3://b?kmskeyid=arn:aws:kms:key/1", "s3://b?kmskeyid=arn:aws:kms:key/1", nil, ""},
		{"case of keys", "s3://b?s3ForcePathStyle=true&region=r", "s3://b?s3ForcePathStyle=true&region=r", nil, ""},
		{"service account", "gs://b?access_id=sa@p.iam.gserviceaccount.com&universe_domain=u", "gs://b?access_id=sa@p.iam.gserviceaccount.com&universe_domain=u", nil, ""},
		{"file", "file:///data/whale", "file:///data/whale", nil, ""},
		{"password with an unescaped #", "s3://admin:1234#secret@bucket", Unparseable, []string{"1234", "secret"}, "user info"},
		{"password with an unescaped /", "s3://user:12/ss@bucket", Unparseable, []string{"12", "ss@"}, "user info"},
		{"password with an unescaped ?", "https://user:zq?ss@host/x", Unparseable, []string{"zq", "ss@"}, "does not parse"},
		{"@ in a path", "gs://bucket/models/run@v2", "gs://bucket/models/run@v2", nil, ""},
		{"no query", "http://h:8000/v1", "http://h:8000/v1", nil, ""},
		{"empty query", "s3://b?", "s3://b?", nil, ""},
		{"encoded key", "s3://b?reg%69on=us-east-1", "s3://b?reg%69on=us-east-1", nil, ""},
		{"flag", "s3://b?anonymous", "s3://b?anonymous", nil, ""},

		// Values under other names go.
		{"presigned", "https://h/o?X-Amz-Signature=abcdef123&X-Amz-Credential=AKIAXXXX%2F2024&X-Amz-Date=20240101",
			"https://h/o?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&X-Amz-Date=REDACTED", []string{"abcdef123", "AKIAXXXX"}, `"X-Amz-Signature" is not a configuration parameter`},
		{"sas", "azblob://c?sig=s3cr3tsig&sv=2020&se=2030", "azblob://c?sig=REDACTED&sv=REDACTED&se=REDACTED", []string{"s3cr3tsig"}, `"sig"`},
		{"access token", "gs://b?access_token=tok123456", "gs://b?access_token=REDACTED", nil, `"access_token"`},
		{"api key", "http://h:8000/v1?api_key=sk-123456", "http://h:8000/v1?api_key=REDACTED", nil, `"api_key"`},
		{"any name", "http://h:8000/v1?whatever=sk-123456", "http://h:8000/v1?whatever=REDACTED", nil, `"whatever"`},
		{"bare token", "http://h/v1?sk-123456", "http://h/v1?REDACTED", []string{"sk-123456"}, "not a configuration parameter"},
		{"odd key", "http://h/v1?sk%21123456=x", "http://h/v1?REDACTED=REDACTED", []string{"123456"}, "not a configuration parameter"},
		{"already redacted", "s3://b?secret=REDACTED&region=r", "s3://b?secret=REDACTED&region=r", nil, ""},

		// Malformed queries go whole; what the URL names stays.
		{"bad escape", "s3://b/p?region=x&secret=LEAK%zz", "s3://b/p?REDACTED=REDACTED", []string{"LEAK"}, "does not parse strictly"},
		{"bad escape in key", "s3://b/p?region=x&se%zzcret=LEAK", "s3://b/p?REDACTED=REDACTED", []string{"LEAK"}, "does not parse strictly"},
		{"truncated escape", "s3://b?region=x&secret=LEAK%2", "s3://b?REDACTED=REDACTED", []string{"LEAK"}, "does not parse strictly"},
		{"semicolons", "s3://b/p?region=x;secret=LEAK", "s3://b/p?REDACTED=REDACTED", []string{"LEAK"}, "';' separator"},
		{"semicolon after safe", "s3://b?endpoint=http://h:1;token=LEAK", "s3://b?REDACTED=REDACTED", []string{"LEAK"}, "';' separator"},
		{"control character", "s3://b?region=x\n&secret=LEAK", "s3://b?REDACTED=REDACTED", []string{"LEAK"}, "control character"},

		// Double encoding: one decoding is all a reader does, and a value
		// encoded twice is not shown under any name.
		{"double-encoded value", "s3://b?secret=LEAK%2525", "s3://b?secret=REDACTED", []string{"LEAK"}, `"secret"`},
		{"double-encoded separator", "s3://b?region=a%2526secret%253DLEAK", "s3://b?region=REDACTED", []string{"LEAK"}, "encoded twice"},
		{"encoded separator", "s3://b?region=a%26secret%3DLEAK", "s3://b?region=a%26secret%3DLEAK", nil, ""},
		{"double-encoded endpoint", "s3://b?endpoint=http%253A%252F%252Fh%252F%253Ftoken%253DLEAK", "s3://b?endpoint=REDACTED", []string{"LEAK"}, "encoded twice"},

		// A kept value that is a URL follows the same policy.
		{"endpoint user info", "s3://b?endpoint=http://u:pw123456@minio:9000&region=x", "s3://b?endpoint=http%3A%2F%2FREDACTED%40minio%3A9000&region=x", []string{"pw123456"}, "its endpoint parameter: it has user info"},
		{"endpoint query", "s3://b?endpoint=http://h:1/%3Ftoken%3DLEAK", "s3://b?endpoint=http%3A%2F%2Fh%3A1%2F%3Ftoken%3DREDACTED", []string{"LEAK"}, `its endpoint parameter: query parameter "token"`},
		{"endpoint fragment", "s3://b?endpoint=http://h:1/%23LEAK", "s3://b?endpoint=http%3A%2F%2Fh%3A1%2F", []string{"LEAK"}, "fragment"},
		{"endpoint without scheme", "s3://b?endpoint=u:LEAK@minio:9000", "s3://b?endpoint=u%3AREDACTED%40minio%3A9000", []string{"LEAK"}, "user info"},

		// Fragments are dropped.
		{"fragment", "http://h/v1#token=abc123", "http://h/v1", []string{"abc123"}, "fragment"},
		{"fragment after query", "s3://b?region=r#LEAK", "s3://b?region=r", []string{"LEAK"}, "fragment"},
		{"empty fragment", "s3://b#", "s3://b", nil, "fragment"},
		{"query in fragment", "s3://b#?region=r&token=LEAK", "s3://b", []string{"LEAK"}, "fragment"},

		// User info goes, wherever it is.
		{"user info", "azblob://user:hunter22@container", "azblob://REDACTED@container", []string{"hunter22"}, "user info"},
		{"user only", "s3://AKIAXXXXXXXX@b/p", "s3://REDACTED@b/p", []string{"AKIAXXXXXXXX"}, "user info"},
		{"empty user info", "s3://@b", "s3://REDACTED@b", nil, "user info"},
		{"at signs", "s3://u@x:p@w@b/p?region=r", "s3://REDACTED@b/p?region=r", []string{"u@x", "p@w"}, "user info"},
		{"user info, no scheme", "//u:LEAK@h/x", "//REDACTED@h/x", []string{"LEAK"}, "user info"},
		{"user info, file", "file://u:pw@/x", "file://REDACTED@/x", []string{"pw"}, "user info"},
		{"user info, bad path", "s3://u:LEAK@b/p%zz?secret=LEAK2", "s3://REDACTED@b/REDACTED?REDACTED=REDACTED", []string{"LEAK", "LEAK2"}, "does not parse"},

		// IPv6 hosts.
		{"ipv6", "http://[::1]:8000/v1?region=r", "http://[::1]:8000/v1?region=r", nil, ""},
		{"ipv6 zone", "http://[fe80::1%25en0]:8000/v1", "http://[fe80::1%25en0]:8000/v1", nil, ""},
		{"ipv6 user info", "http://u:LEAK@[::1]:8000/v1?api_key=LEAK2", "http://REDACTED@[::1]:8000/v1?api_key=REDACTED", []string{"LEAK"}, "user info"},
		{"ipv6 bad path", "http://u:LEAK@[::1]:8000/%zz?x=1", "http://REDACTED@[::1]:8000/REDACTED?REDACTED=REDACTED", []string{"LEAK"}, "does not parse"},

		// Opaque URLs.
		{"opaque", "s3:bucket?x=y", "s3:bucket?x=REDACTED", nil, `"x"`},
		{"opaque config", "s3:bucket?region=r", "s3:bucket?region=r", nil, ""},
		{"opaque user info", "s3:user:LEAK@bucket?region=r", "s3:REDACTED@bucket?region=r", []string{"LEAK"}, "user info"},

		// What does not parse goes whole, but for scheme and host.
		{"bad host", "s3://b%zz?secret=LEAK", Unparseable, []string{"LEAK"}, "does not parse"},
		{"bad url", "://bad url", Unparseable, nil, "does not parse"},
		{"bad path", "s3://b/p%zz/q?region=r", "s3://b/REDACTED?REDACTED=REDACTED", nil, "does not parse"},
		{"bad path, no query", "s3://b/p%zz", "s3://b/REDACTED", nil, "does not parse"},
		{"control in host", "http://h\x00LEAK/", Unparseable, []string{"LEAK"}, "does not parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := URL(tc.in)
			if tc.want != "" && got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for _, g := range tc.gone {
				if strings.Contains(got, g) {
					t.Errorf("URL(%q) = %q still holds %q", tc.in, got, g)
				}
			}
			if again := URL(got); again != got {
				t.Errorf("URL not idempotent: %q -> %q -> %q", tc.in, got, again)
			}
			err := Check(tc.in)
			switch {
			case tc.why == "" && err != nil:
				t.Errorf("Check(%q) = %v, want nil", tc.in, err)
			case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
				t.Errorf("Check(%q) = %v, want it to say %q", tc.in, err, tc.why)
			}
			if err != nil {
				for _, g := range append(tc.gone, "LEAK") {
					if strings.Contains(err.Error(), g) {
						t.Errorf("Check(%q) = %v shows %q", tc.in, err, g)
					}
				}
			}
		})
	}
}

// checkShown fails unless s is something URL may return: it parses, has
// no fragment, no user info but Mark, and its query parses strictly with
// no value other than Mark except under a configuration parameter, whose
// value, when it may be a URL, obeys the same rules.
func checkShown(t *testing.T, in, s string) {
	t.Helper()
	if s == Unparseable {
		return
	}
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("URL(%q) = %q, which does not parse: %v", in, s, err)
	}
	if strings.Contains(s, "#") {
		t.Fatalf("URL(%q) = %q keeps a fragment", in, s)
	}
	if u.User != nil && u.User.String() != Mark {
		t.Fatalf("URL(%q) = %q keeps user info %q", in, s, u.User.String())
	}
	if at := strings.LastIndex(u.Opaque, "@"); at >= 0 && u.Opaque[:at] != Mark {
		t.Fatalf("URL(%q) = %q keeps user info in %q", in, s, u.Opaque)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		t.Fatalf("URL(%q) = %q, whose query does not parse: %v", in, s, err)
	}
	for k, vs := range q {
		for _, v := range vs {
			switch {
			case !Safe(k):
				if v != Mark && !(v == "" && k == Mark) {
					t.Fatalf("URL(%q) = %q keeps %s=%q", in, s, k, v)
				}
			case regexp.MustCompile(`%[0-9A-Fa-f]{2}`).MatchString(v):
				t.Fatalf("URL(%q) = %q keeps %s=%q, encoded twice", in, s, k, v)
			case strings.Contains(v, "://") || strings.ContainsAny(v, "@?#"):
				checkShown(t, in, v)
			}
		}
	}
}

// For any input: what URL returns holds no query value but configuration
// parameters' (checkShown), URL is idempotent, and Check passes exactly
// when URL changes nothing.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true",
		"s3://b/p?region=x&secret=LEAK%zz", "s3://b/p?region=x;secret=LEAK", "s3:bucket?x=y",
		"http://u:p@[::1]:80/x?api_key=k#frag", "s3://b?endpoint=http://h:1/%3Ftoken%3DLEAK",
		"s3://b?endpoint=http%253A%252F%252Fh%252F%253Ftoken%253DLEAK", "//u:p@h/x", "s3:u:p@b",
		"s3://u:LEAK@b/p%zz?secret=LEAK2", "azblob://c?sig=s&sv=1", "file:///data/whale", "?a&b=c", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := URL(raw)
		checkShown(t, raw, got)
		if again := URL(got); again != got {
			t.Fatalf("URL not idempotent: %q -> %q -> %q", raw, got, again)
		}
		if err := Check(raw); (err == nil) != (got == raw) {
			t.Fatalf("Check(%q) = %v but URL = %q", raw, err, got)
		}
		if err := Check(got); err != nil {
			t.Fatalf("Check(URL(%q)) = Check(%q) = %v", raw, got, err)
		}
	})
}

// A secret given as the value of a parameter that is not configuration,
// whatever surrounds it and whichever separator precedes it, is not in
// what URL returns unless the rest of the input holds it too.
func FuzzURLSecret(f *testing.F) {
	f.Add("s3://b/p", "region=r", "token", "s3cr3tvalue", "endpoint=http://h:1", false)
	f.Add("http://u:p@[::1]:80/x", "", "api_key", "sk123456", "a=%zz", true)
	f.Add("s3:bucket", "endpoint=http://h/%3F", "sig", "Zm9vYmFy", "", false)
	f.Fuzz(func(t *testing.T, base, before, key, secret, after string, semicolon bool) {
		if !regexp.MustCompile(`^[A-Za-z0-9]{6,}$`).MatchString(secret) || !paramName.MatchString(key) || Safe(key) {
			return
		}
		mentions := func(s string) bool {
			for _, form := range []string{s, unescape(url.QueryUnescape, s), unescape(url.PathUnescape, s)} {
				if strings.Contains(strings.ToLower(form), strings.ToLower(secret)) {
					return true
				}
			}
			return false
		}
		if mentions(base) || mentions(before) || mentions(key) || mentions(after) || mentions(Mark) || mentions(Unparseable) {
			return
		}
		sep := "&"
		if semicolon {
			sep = ";"
		}
		raw := base + "?" + before + sep + key + "=" + secret + sep + after
		if got := URL(raw); strings.Contains(strings.ToLower(got), strings.ToLower(secret)) {
			t.Fatalf("URL(%q) = %q keeps the %s value", raw, got, key)
		}
		if err := Check(raw); err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("Check(%q) = %v", raw, err)
		}
	})
}

func unescape(fn func(string) (string, error), s string) string {
	out, err := fn(s)
	if err != nil {
		return s
	}
	return out
}

func TestError(t *testing.T) {
	cause := errors.New("connection refused")
	err := Error(fmt.Errorf("call: %w", &url.Error{Op: "Post", URL: "http://u:pw@h:1/v1/chat?api_key=sk-999", Err: cause}))
	if s := err.Error(); strings.Contains(s, "pw") || strings.Contains(s, "sk-999") || !strings.Contains(s, "connection refused") || !strings.Contains(s, "h:1/v1/chat") {
		t.Errorf("Error = %q", s)
	}
	if !errors.Is(err, cause) {
		t.Error("the cause is lost")
	}
	plain := errors.New("plain")
	if Error(plain) != plain {
		t.Error("an error without a URL changed")
	}
}

func TestCheckText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"whale step --root s3://b/p?endpoint=http://127.0.0.1:7070&region=r run", ""},
		{"--root=file:///data/whale", ""},
		{"no url here: token=abc", ""},
		{"--root=s3://b?region=r&token=LEAK", `URL s3://b?region=r&token=REDACTED: query parameter "token"`},
		{"see (s3://k:LEAK@b).", "URL s3://REDACTED@b: it has user info"},
		{"s3://b?region=r;token=LEAK", "';' separator"},
	} {
		err := CheckText(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckText(%q) = %v, want nil", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "LEAK")):
			t.Errorf("CheckText(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	getenv = func(k string) string {
		if k == "AWS_SECRET_ACCESS_KEY" {
			return "wJalrXUtnFEMI"
		}
		return ""
	}
	defer func() { getenv = os.Getenv }()
	in := `signature mismatch for key wJalrXUtnFEMI at https://h/o?X-Amz-Signature=abc123&region=eu-1 token=tok999 kmskeyid=arn1; ` +
		`Post "http://u:pw1234@h:1/v1?opaque=LEAK1%zz": refused (see s3://b?endpoint=http://h:1&whatever=LEAK2).`
	got := Text(in)
	for _, g := range []string{"wJalrXUtnFEMI", "abc123", "tok999", "pw1234", "LEAK1", "LEAK2"} {
		if strings.Contains(got, g) {
			t.Errorf("Text = %q still holds %q", got, g)
		}
	}
	for _, keep := range []string{"kmskeyid=arn1", "region=eu-1", `Post "http://REDACTED@h:1/v1?REDACTED=REDACTED": refused`, "whatever=REDACTED)."} {
		if !strings.Contains(got, keep) {
			t.Errorf("Text = %q; want it to hold %q", got, keep)
		}
	}
}

// Text works line by line: the same text on many lines, with lines that
// need nothing between, comes out as each line does alone.
func TestTextLines(t *testing.T) {
	lines := []string{
		"plain words, nothing to hide\n",
		"Post \"http://u:pw1234@h:1/v1?opaque=LEAK1\": refused\n",
		"api_key=sk-LEAK2 and more\n",
		"x = 1; y=2 and https://h/o?token=LEAK3\r\n",
		"",
		"last line without a newline https://a:b@c/d",
	}
	var in, want strings.Builder
	for i := range 50 {
		l := lines[i%len(lines)]
		if i%len(lines) == len(lines)-1 {
			l += "\n"
		}
		in.WriteString(l)
		want.WriteString(Text(l))
	}
	if got := Text(in.String()); got != want.String() {
		t.Fatalf("Text of the whole differs from Text of each line:\n%s\nvs\n%s", got, want.String())
	}
	// And as the expressions give over the whole text at once.
	whole := urlInText.ReplaceAllStringFunc(in.String(), func(u string) string {
		trimmed := strings.TrimRight(u, urlEnd)
		return URL(trimmed) + u[len(trimmed):]
	})
	if whole = secretInText.ReplaceAllString(whole, "${1}"+Mark); whole != want.String() {
		t.Fatalf("Text line by line differs from the expressions over the whole text:\n%s\nvs\n%s", want.String(), whole)
	}
	for _, leak := range []string{"pw1234", "LEAK1", "LEAK2", "LEAK3", "a:b@"} {
		if strings.Contains(want.String(), leak) {
			t.Errorf("%q shows", leak)
		}
	}
}
