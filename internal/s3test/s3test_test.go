package s3test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedServerRoundTrip(t *testing.T) {
	s := Shared(t)
	if got := os.Getenv("AWS_SECRET_ACCESS_KEY"); got != s.SecretKey {
		t.Fatalf("AWS_SECRET_ACCESS_KEY not set to the server's secret")
	}
	if s2 := Shared(t); s2 != s {
		t.Fatal("Shared started a second server")
	}
	bucket := s.NewBucket(t)
	if other := s.NewBucket(t); other == bucket {
		t.Fatalf("two buckets named %s", bucket)
	}
	ctx := context.Background()
	c := s.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b.txt"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatalf("put: %v\nserver output:\n%s", err, s.Output())
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b.txt")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	defer out.Body.Close()
	if b, _ := io.ReadAll(out.Body); string(b) != "hello" {
		t.Fatalf("got %q, want hello", b)
	}
	if u := s.URL(bucket); !strings.HasPrefix(u, "s3://"+bucket+"?endpoint=http://127.0.0.1:") || !strings.Contains(u, "use_path_style=true") {
		t.Fatalf("URL %s", u)
	}
	t.Logf("sidecar metadata: %v", s.Sidecar)
}

func TestBinaryLookup(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "versitygw")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env string
		want      func(string) bool
	}{
		{"env wins", fake, func(p string) bool { return p == fake }},
		{"env not executable falls through", notExec, func(p string) bool { return p != notExec }},
		{"env missing falls through", filepath.Join(dir, "nope"), func(p string) bool { return p != filepath.Join(dir, "nope") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WHALE_VERSITYGW", tc.env)
			p, err := Binary()
			if err != nil {
				if !errors.Is(err, errNotBuilt) {
					t.Fatalf("Binary: %v", err)
				}
				return // nothing else on this machine; the fall-through still happened
			}
			if !tc.want(p) {
				t.Fatalf("Binary() = %s", p)
			}
		})
	}
}

// TestFaultProxyInjects checks the proxy itself with an SDK client that
// does not retry, so every injected fault is seen.
func TestFaultProxyInjects(t *testing.T) {
	s := Shared(t)
	bucket := s.NewBucket(t)
	p := NewFaultProxy(t, s.Endpoint)
	p.SetDelay(50 * time.Millisecond)
	c := s3.New(s3.Options{Region: Region, BaseEndpoint: aws.String(p.URL), UsePathStyle: true,
		Credentials: s.Client().Options().Credentials, RetryMaxAttempts: 1})
	ctx := context.Background()
	put := func() error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v")})
		return err
	}
	tests := []struct {
		fault  Fault
		status int // 0: no HTTP answer
		code   string
	}{
		{SlowDown, http.StatusServiceUnavailable, "SlowDown"},
		{Internal, http.StatusInternalServerError, ""},
		{Throttle, http.StatusTooManyRequests, ""},
		{Forbidden, http.StatusForbidden, "AccessDenied"},
		{Drop, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			p.Reset()
			p.Inject(1, tc.fault)
			err := put()
			if err == nil {
				t.Fatal("put through an injected fault succeeded")
			}
			var re interface{ HTTPStatusCode() int }
			if tc.status != 0 {
				if !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
					t.Fatalf("err %v, want status %d", err, tc.status)
				}
			}
			var ae smithy.APIError
			if tc.code != "" && (!errors.As(err, &ae) || ae.ErrorCode() != tc.code) {
				t.Fatalf("err %v, want code %s", err, tc.code)
			}
			if err := put(); err != nil {
				t.Fatalf("put after the fault: %v", err)
			}
			if p.Requests() != 2 || p.Faults() != 1 {
				t.Fatalf("requests %d faults %d, want 2 and 1", p.Requests(), p.Faults())
			}
		})
	}
	t.Run("delay", func(t *testing.T) {
		p.Reset()
		p.Inject(1, Delay)
		start := time.Now()
		if err := put(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("delayed put took %s, want >= 50ms", d)
		}
	})
}

// TestSidecarMode runs a private server as it would run on a filesystem
// without extended attributes.
func TestSidecarMode(t *testing.T) {
	probeXattrs = func(string) bool { return false }
	t.Cleanup(func() { probeXattrs = xattrsWork })
	s := Start(t)
	if !s.Sidecar {
		t.Fatal("server not in sidecar mode")
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") != s.AccessKey {
		t.Fatal("Start did not set AWS_ACCESS_KEY_ID")
	}
	bucket := s.NewBucket(t)
	ctx := context.Background()
	c := s.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v"),
		Metadata: map[string]string{"m": "1"}}); err != nil {
		t.Fatalf("put: %v\n%s", err, s.Output())
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["m"] != "1" {
		t.Fatalf("metadata %v not kept in sidecar mode", h.Metadata)
	}
}
