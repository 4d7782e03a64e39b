package redact

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct {
		in, want string
		gone     []string
	}{
		{"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true",
			"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true", nil},
		{"azblob://user:hunter22@container", "azblob://REDACTED@container", []string{"hunter22", "user"}},
		{"https://h/o?X-Amz-Signature=abcdef123&X-Amz-Credential=AKIAXXXX%2F2024&X-Amz-Date=20240101", "", []string{"abcdef123", "AKIAXXXX"}},
		{"azblob://c?sig=s3cr3tsig&sv=2020", "", []string{"s3cr3tsig"}},
		{"gs://b?access_token=tok123456", "gs://b?access_token=REDACTED", nil},
		{"http://h:8000/v1?api_key=sk-123456", "http://h:8000/v1?api_key=REDACTED", nil},
		{"http://h:8000/v1?whatever=sk-123456", "http://h:8000/v1?whatever=REDACTED", nil},
		{"s3://b?endpoint=http://u:pw123456@minio:9000&region=x", "", []string{"pw123456"}},
		{"s3://b?kmskeyid=arn:aws:kms:key/1", "s3://b?kmskeyid=arn:aws:kms:key/1", nil},
		{"http://h/v1#token=abc123", "http://h/v1", nil},
		{"http://h/v1?a=%zz", "http://h/v1?REDACTED=REDACTED", nil},
		{"file:///data/whale", "file:///data/whale", nil},
		{"http://h:8000/v1", "http://h:8000/v1", nil},
		{"s3://b?s3ForcePathStyle=true&region=r", "s3://b?s3ForcePathStyle=true&region=r", nil},
		{"gs://b?access_id=sa@p.iam.gserviceaccount.com&universe_domain=u", "gs://b?access_id=sa@p.iam.gserviceaccount.com&universe_domain=u", nil},
		{"://bad url", Unparseable, nil},
		// The cases of storage's redactor, which this one replaced: bucket
		// URLs keep their configuration and lose their secrets.
		{"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1",
			"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1", nil},
		{"azblob://user:hunter22@container", "azblob://REDACTED@container", []string{"hunter22"}},
		{"https://h/o?X-Amz-Signature=abcdef123&X-Amz-Credential=AKIAXXXX%2F2024&X-Amz-Date=20240101",
			"", []string{"abcdef123", "AKIAXXXX"}},
		{"azblob://c?sig=s3cr3tsig&sv=2020&se=2030", "", []string{"s3cr3tsig"}},
		{"gs://b?access_token=tok123456", "", []string{"tok123456"}},
		{"s3://b?endpoint=http://u:pw123456@minio:9000&region=x", "", []string{"pw123456"}},
		{"s3://b?kmskeyid=arn:aws:kms:key/1", "s3://b?kmskeyid=arn:aws:kms:key/1", nil},
		{"file:///data/whale", "file:///data/whale", nil},
		{"://bad url", "<unparseable URL>", nil},
	}
	for _, tc := range tests {
		got := URL(tc.in)
		if tc.want != "" && got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, g := range tc.gone {
			if strings.Contains(got, g) {
				t.Errorf("URL(%q) = %q still holds %q", tc.in, got, g)
			}
		}
		if again := URL(got); again != got && got != Unparseable {
			t.Errorf("URL not idempotent: %q -> %q -> %q", tc.in, got, again)
		}
	}
}

func FuzzURL(f *testing.F) {
	f.Add("bucket", "user", "pa55word", "sig", "s3cr3tvalue")
	f.Add("127.0.0.1:7070", "", "", "X-Amz-Signature", "deadbeefcafe")
	f.Add("c", "u", "p@ss:w/rd?", "token", "t&k=n")
	f.Fuzz(func(t *testing.T, host, user, pw, param, value string) {
		u := &url.URL{Scheme: "s3", Host: host, RawQuery: url.Values{param: {value}, "region": {"r"}}.Encode()}
		if user != "" || pw != "" {
			u.User = url.UserPassword(user, pw)
		}
		raw := u.String()
		got := URL(raw)
		if again := URL(got); again != got && got != Unparseable {
			t.Fatalf("URL not idempotent: %q -> %q -> %q", raw, got, again)
		}
		if _, err := url.Parse(raw); err != nil {
			return
		}
		secret := func(s string) bool {
			// Short or unremarkable strings may occur in the rest of the
			// URL by chance.
			return len(s) >= 6 && !strings.Contains(host, s) && !strings.Contains(param, s) &&
				!strings.Contains("s3://REDACTED@?region=r&", s)
		}
		if (user != "" || pw != "") && secret(pw) && strings.Contains(got, url.PathEscape(pw)) {
			t.Fatalf("URL(%q) = %q keeps the password", raw, got)
		}
		if !strings.EqualFold(param, "region") && secret(value) && strings.Contains(got, url.QueryEscape(value)) && !isSafe(param) {
			t.Fatalf("URL(%q) = %q keeps the %s value", raw, got, param)
		}
	})
}

func isSafe(param string) bool {
	for _, p := range safeParams {
		if strings.EqualFold(p, param) {
			return true
		}
	}
	return false
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

func TestText(t *testing.T) {
	getenv = func(k string) string {
		if k == "AWS_SECRET_ACCESS_KEY" {
			return "wJalrXUtnFEMI"
		}
		return ""
	}
	defer func() { getenv = os.Getenv }()
	in := `signature mismatch for key wJalrXUtnFEMI at https://h/o?X-Amz-Signature=abc123&x=1 token=tok999 kmskeyid=arn1`
	got := Text(in)
	for _, g := range []string{"wJalrXUtnFEMI", "abc123", "tok999"} {
		if strings.Contains(got, g) {
			t.Errorf("Text = %q still holds %q", got, g)
		}
	}
	if !strings.Contains(got, "kmskeyid=arn1") || !strings.Contains(got, "x=1") {
		t.Errorf("Text = %q removed what is no secret", got)
	}
}
