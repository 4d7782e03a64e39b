package storage_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
	"github.com/whalerun/whale/storage/storagetest"
)

// faultStore opens a fresh bucket of the shared versitygw through a fake
// fault-injecting proxy.
func faultStore(t *testing.T, p storage.RetryPolicy) (*storage.Store, *s3test.FaultProxy, *s3test.Server) {
	t.Helper()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	s := storagetest.OpenUnder(t, s3test.URLFor(proxy.URL, bucket), &storage.Options{Retry: &p})
	return s, proxy, srv
}

var tinyRetry = storage.RetryPolicy{Attempts: 6, Base: time.Millisecond, Max: 5 * time.Millisecond}

// TestFakeFaultProxyRetriesThenSucceeds: every operation survives a burst
// of 503/500/429 answers and dropped connections from a fake proxy in
// front of versitygw; each fault costs exactly one request.
func TestFakeFaultProxyRetriesThenSucceeds(t *testing.T) {
	s, proxy, _ := faultStore(t, tinyRetry)
	ctx := context.Background()
	if err := s.WriteAll(ctx, "seed/obj.json", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	n := 0
	ops := []struct {
		name     string
		fn       func() error
		requests int // on success without faults
		prep     func() error
	}{
		{"Put", func() error { return s.Put(ctx, "put/obj.bin", bytes.NewReader([]byte("payload"))) }, 1, nil},
		{"ReadAll", func() error {
			b, err := s.ReadAll(ctx, "seed/obj.json")
			if err == nil && string(b) != `{"a":1}` {
				err = errors.New("wrong content " + string(b))
			}
			return err
		}, 1, nil},
		{"Stat", func() error { _, err := s.Stat(ctx, "seed/obj.json"); return err }, 1, nil},
		{"List", func() error {
			c := 0
			err := s.List(ctx, "seed/", false, func(storage.Entry) error { c++; return nil })
			if err == nil && c != 1 {
				err = errors.New("listed wrong count")
			}
			return err
		}, 1, nil},
		{"CreateExclusive", func() error {
			n++
			return s.CreateExclusive(ctx, "excl/"+strings.Repeat("x", n), []byte("mine"))
		}, 1, nil},
		// s3blob's Delete asks HEAD first, to report a missing key.
		{"Delete", func() error { return s.Delete(ctx, "del/obj.bin") }, 2,
			func() error { return s.WriteAll(ctx, "del/obj.bin", []byte("x")) }},
	}
	faults := []s3test.Fault{s3test.SlowDown, s3test.Internal, s3test.Throttle, s3test.Drop}
	for _, op := range ops {
		for _, f := range faults {
			// 2 faults the SDK's own retries absorb; 4 need a second try
			// of the Store's policy too.
			for _, count := range []int{2, 4} {
				t.Run(op.name+"/"+f.String()+"/"+string(rune('0'+count)), func(t *testing.T) {
					if op.prep != nil {
						if err := op.prep(); err != nil {
							t.Fatal(err)
						}
					}
					proxy.Reset()
					proxy.Inject(count, f)
					if err := op.fn(); err != nil {
						t.Fatalf("after %d × %s: %v", count, f, err)
					}
					if got, want := proxy.Requests(), int64(count+op.requests); got != want {
						t.Fatalf("%d requests, want %d (one per fault, then success)", got, want)
					}
				})
			}
		}
	}
}

// TestFakeFaultProxyGivesUp: a server that keeps failing exhausts the
// policy and the error says where and that it is transient.
func TestFakeFaultProxyGivesUp(t *testing.T) {
	p := storage.RetryPolicy{Attempts: 2, Base: time.Millisecond, Max: time.Millisecond}
	s, proxy, _ := faultStore(t, p)
	proxy.Inject(100, s3test.SlowDown)
	_, err := s.Stat(context.Background(), "k/v.json")
	if err == nil {
		t.Fatal("Stat through an always-failing server succeeded")
	}
	// The SDK tries 3 times within each of the policy's 2 attempts.
	if got := proxy.Requests(); got != 6 {
		t.Fatalf("%d requests, want 6", got)
	}
	if !storage.Transient(err) || !strings.Contains(err.Error(), "k/v.json") || !strings.Contains(err.Error(), s.URL()) {
		t.Fatalf("err %v: want a transient error naming the key and root", err)
	}
}

// TestFakeFaultProxyAttemptTimeout: a request that hangs is cut off by
// AttemptTimeout and retried, instead of waiting for the server.
func TestFakeFaultProxyAttemptTimeout(t *testing.T) {
	p := tinyRetry
	p.AttemptTimeout = 200 * time.Millisecond
	s, proxy, _ := faultStore(t, p)
	ctx := context.Background()
	if err := s.WriteAll(ctx, "slow.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	proxy.Reset()
	proxy.SetDelay(3 * time.Second)
	proxy.Inject(1, s3test.Delay)
	start := time.Now()
	if _, err := s.Stat(ctx, "slow.json"); err != nil {
		t.Fatalf("Stat after one hanging request: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Stat took %s: the hanging request was waited for", d)
	}
	if got := proxy.Requests(); got != 2 {
		t.Fatalf("%d requests, want 2", got)
	}
}

// TestFakeFaultProxyCallerDeadline: the caller's deadline ends retries at
// once and shows in the error.
func TestFakeFaultProxyCallerDeadline(t *testing.T) {
	p := storage.RetryPolicy{Attempts: 50, Base: 50 * time.Millisecond, Max: 50 * time.Millisecond}
	s, proxy, _ := faultStore(t, p)
	proxy.SetDelay(time.Second)
	proxy.Inject(100, s3test.Delay)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Stat(ctx, "any.json")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Stat returned after %s, long past the caller's deadline", d)
	}
}

// TestPermanentErrorsFailAtOnce: wrong credentials, a missing bucket, a
// 403 and a missing key cost one request each and come back classified,
// naming the redacted root and the key and holding no credential.
func TestPermanentErrorsFailAtOnce(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	ctx := context.Background()
	good := storagetest.OpenUnder(t, s3test.URLFor(proxy.URL, bucket), &storage.Options{Retry: &tinyRetry})
	if err := good.WriteAll(ctx, "present.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	const wrongSecret = "wrong-secret-0123456789"
	tests := []struct {
		name   string
		setup  func(t *testing.T) *storage.Store
		op     func(s *storage.Store) error
		key    string
		kind   error
		faults int
	}{
		{"wrong secret", func(t *testing.T) *storage.Store {
			t.Setenv("AWS_SECRET_ACCESS_KEY", wrongSecret)
			return storagetest.OpenUnder(t, s3test.URLFor(proxy.URL, bucket), &storage.Options{Retry: &tinyRetry})
		}, func(s *storage.Store) error { return s.WriteAll(ctx, "runs/r1/run.json", []byte("{}")) }, "runs/r1/run.json", storage.ErrPermission, 0},
		{"wrong secret on read", func(t *testing.T) *storage.Store {
			t.Setenv("AWS_SECRET_ACCESS_KEY", wrongSecret)
			return storagetest.OpenUnder(t, s3test.URLFor(proxy.URL, bucket), &storage.Options{Retry: &tinyRetry})
		}, func(s *storage.Store) error { _, err := s.ReadAll(ctx, "present.json"); return err }, "present.json", storage.ErrPermission, 0},
		{"missing bucket", func(t *testing.T) *storage.Store {
			return storagetest.OpenUnder(t, s3test.URLFor(proxy.URL, "no-such-bucket-"+storagetest.RandomHex(3)), &storage.Options{Retry: &tinyRetry})
		}, func(s *storage.Store) error { return s.CreateExclusive(ctx, "lease/0000000001.json", []byte("{}")) }, "lease/0000000001.json", storage.ErrNotFound, 0},
		{"403 from the server", func(t *testing.T) *storage.Store { return good },
			func(s *storage.Store) error { _, err := s.Stat(ctx, "present.json"); return err }, "present.json", storage.ErrPermission, 1},
		{"missing key", func(t *testing.T) *storage.Store { return good },
			func(s *storage.Store) error { _, err := s.ReadAll(ctx, "absent.json"); return err }, "absent.json", storage.ErrNotFound, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.setup(t)
			proxy.Reset()
			proxy.Inject(tc.faults, s3test.Forbidden)
			err := tc.op(s)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err %v, want %v", err, tc.kind)
			}
			if storage.Transient(err) {
				t.Fatalf("err %v classified transient", err)
			}
			if got := proxy.Requests(); got != 1 {
				t.Fatalf("%d requests, want 1: a permanent error is not retried", got)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.key) || !strings.Contains(msg, s.URL()) {
				t.Fatalf("message %q does not name the root %s and key %s", msg, s.URL(), tc.key)
			}
			for _, secret := range []string{srv.SecretKey, srv.AccessKey, wrongSecret} {
				if strings.Contains(msg, secret) {
					t.Fatalf("message %q holds a credential", msg)
				}
			}
		})
	}
}
