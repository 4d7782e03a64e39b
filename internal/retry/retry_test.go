package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBackoffIsFullJitterUnderTheCeiling(t *testing.T) {
	const forever = time.Duration(1<<63 - 1)
	tests := []struct {
		name string
		p    Policy
		n    int
		ceil time.Duration
	}{
		{"first retry", Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second}, 0, 100 * time.Millisecond},
		{"third retry doubles twice", Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second}, 2, 400 * time.Millisecond},
		{"capped", Policy{Base: 100 * time.Millisecond, Max: time.Second}, 10, time.Second},
		{"huge exponent does not overflow", Policy{Base: time.Second, Max: 5 * time.Second}, 200, 5 * time.Second},
		{"no cap saturates", Policy{Base: time.Hour}, 70, forever},
		{"negative n is the first", Policy{Base: time.Millisecond, Max: time.Second}, -3, time.Millisecond},
		{"no base, no wait", Policy{Max: time.Second}, 5, 0},
		{"negative base, no wait", Policy{Base: -time.Second, Max: time.Second}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.ceiling(tc.n); got != tc.ceil {
				t.Fatalf("ceiling %v, want %v", got, tc.ceil)
			}
			var low, high bool
			for range 500 {
				d := tc.p.Backoff(tc.n)
				if d < 0 || d > tc.ceil {
					t.Fatalf("backoff %v outside [0, %v]", d, tc.ceil)
				}
				low, high = low || d < tc.ceil/2, high || d > tc.ceil/2
			}
			// Full jitter reaches both halves of the range (each miss has
			// odds of 2^-500).
			if tc.ceil > 0 && !(low && high) {
				t.Fatalf("500 draws stayed in one half of [0, %v]", tc.ceil)
			}
		})
	}
}

func TestRetryAfterCap(t *testing.T) {
	for _, tc := range []struct{ max, want time.Duration }{
		{0, time.Minute}, {time.Second, time.Minute}, {5 * time.Minute, 5 * time.Minute},
	} {
		if got := (Policy{Max: tc.max}).RetryAfterCap(); got != tc.want {
			t.Errorf("Max %v: cap %v, want %v", tc.max, got, tc.want)
		}
	}
}

// fakeSleep records the waits instead of sleeping.
type fakeSleep struct{ waits []time.Duration }

func (f *fakeSleep) option() Option {
	return func(o *options) {
		o.sleep = func(ctx context.Context, d time.Duration) error {
			f.waits = append(f.waits, d)
			return ctx.Err()
		}
	}
}

func TestDo(t *testing.T) {
	errBusy := errors.New("busy")
	errBad := errors.New("bad request")
	p := Policy{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}
	tests := []struct {
		name      string
		p         Policy
		results   []error // returned by the tries in turn, then nil
		wantCalls int
		wantErr   error  // matched with errors.Is; nil means success
		wantMsg   string // the error's text, when not ""
		wantTries int    // *Error.Attempts; 0 when no *Error is wanted
		// minWait and maxWait bound each recorded wait.
		minWait, maxWait time.Duration
	}{
		{name: "success at once", p: p, wantCalls: 1},
		{name: "transient then success", p: p, results: []error{errBusy, errBusy}, wantCalls: 3, maxWait: 2 * time.Millisecond},
		{name: "permanent at once", p: p, results: []error{Permanent(errBad), errBusy}, wantCalls: 1, wantErr: errBad, wantMsg: "bad request"},
		{name: "permanent under the caller's wrapping", p: p, results: []error{fmt.Errorf("call: %w", Permanent(errBad))}, wantCalls: 1,
			wantErr: errBad, wantMsg: "call: bad request"},
		{name: "permanent after a transient", p: p, results: []error{errBusy, Permanent(errBad)}, wantCalls: 2, wantErr: errBad, maxWait: 2 * time.Millisecond},
		{name: "tries run out", p: p, results: []error{errBusy, errBusy, errBusy, nil}, wantCalls: 3, wantErr: errBusy,
			wantMsg: "gave up after 3 attempts: busy", wantTries: 3, maxWait: 2 * time.Millisecond},
		{name: "zero policy tries once", results: []error{errBusy, nil}, wantCalls: 1, wantErr: errBusy, wantMsg: "busy", wantTries: 1},
		{name: "Retry-After is honoured", p: p, results: []error{After(errBusy, 3*time.Second)}, wantCalls: 2,
			minWait: 3 * time.Second, maxWait: 3 * time.Second},
		{name: "Retry-After is capped", p: p, results: []error{After(errBusy, time.Hour)}, wantCalls: 2,
			minWait: time.Minute, maxWait: time.Minute},
		{name: "Retry-After shorter than the backoff", p: Policy{Attempts: 2, Base: time.Hour, Max: time.Hour},
			results: []error{After(errBusy, time.Nanosecond)}, wantCalls: 2, maxWait: time.Hour},
		{name: "Retry-After mark is dropped from the error", p: Policy{Attempts: 1}, results: []error{After(errBusy, time.Second)},
			wantCalls: 1, wantErr: errBusy, wantMsg: "busy", wantTries: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var events []Event
			var fs fakeSleep
			err := Do(context.Background(), tc.p, func(context.Context) error {
				calls++
				if calls <= len(tc.results) {
					return tc.results[calls-1]
				}
				return nil
			}, fs.option(), OnRetry(func(e Event) { events = append(events, e) }))
			if calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls, tc.wantCalls)
			}
			if (err == nil) != (tc.wantErr == nil) || !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantMsg != "" && err.Error() != tc.wantMsg {
				t.Fatalf("message %q, want %q", err, tc.wantMsg)
			}
			if _, marked := err.(*permanent); marked {
				t.Fatalf("err %v still carries the Permanent mark outermost", err)
			}
			var re *Error
			if errors.As(err, &re) != (tc.wantTries > 0) || (re != nil && (re.Attempts != tc.wantTries || re.Cause != nil)) {
				t.Fatalf("err %#v, want an *Error of %d attempts: %t", err, tc.wantTries, tc.wantTries > 0)
			}
			if re != nil {
				var ae *after
				if errors.As(re.Err, &ae) {
					t.Fatalf("Error.Err %v keeps the After mark", re.Err)
				}
			}
			// One wait and one event per retry, numbered from 1.
			if len(fs.waits) != len(events) || len(events) != max(calls-1, 0) {
				t.Fatalf("%d waits and %d events for %d calls", len(fs.waits), len(events), calls)
			}
			for i, e := range events {
				if e.Attempt != i+1 || e.Wait != fs.waits[i] || e.Err == nil {
					t.Fatalf("event %d: %+v (wait %v)", i, e, fs.waits[i])
				}
				if w := fs.waits[i]; w < tc.minWait || w > tc.maxWait {
					t.Fatalf("wait %v outside [%v, %v]", w, tc.minWait, tc.maxWait)
				}
			}
		})
	}
}

func TestDoContext(t *testing.T) {
	errBusy := errors.New("busy")
	slow := Policy{Attempts: 100, Base: time.Hour, Max: time.Hour}

	t.Run("cancel during a wait returns promptly", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		calls := 0
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		err := Do(ctx, slow, func(context.Context) error { calls++; return errBusy })
		// Generous: a loaded machine may be slow, but not an hour slow.
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("Do returned %v after the cancel", el)
		}
		var re *Error
		if !errors.As(err, &re) || re.Attempts != 1 || calls != 1 {
			t.Fatalf("err %v after %d calls, want an *Error of 1 attempt", err, calls)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) || !errors.Is(re.Cause, context.Canceled) {
			t.Fatalf("err %v, want both the last error and ctx's", err)
		}
		if want := "busy (retries stopped after 1 attempt: context canceled)"; err.Error() != want {
			t.Fatalf("message %q, want %q", err, want)
		}
	})

	t.Run("the cause of the cancel is kept", func(t *testing.T) {
		why := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(context.Background())
		var fs fakeSleep
		err := Do(ctx, slow, func(context.Context) error { cancel(why); return errBusy }, fs.option())
		if !errors.Is(err, why) || !errors.Is(err, errBusy) || len(fs.waits) != 0 {
			t.Fatalf("err %v after %d waits, want the cause and no wait", err, len(fs.waits))
		}
	})

	t.Run("a try that fails after the deadline is not repeated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		calls := 0
		err := Do(ctx, Policy{Attempts: 5}, func(ctx context.Context) error {
			calls++
			<-ctx.Done()
			return fmt.Errorf("read: %w", ctx.Err())
		})
		var re *Error
		if calls != 1 || !errors.As(err, &re) || !errors.Is(re.Cause, context.DeadlineExceeded) {
			t.Fatalf("err %v after %d calls", err, calls)
		}
	})

	t.Run("a permanent error wins over the ended context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		errGone := errors.New("not found")
		if err := Do(ctx, slow, func(context.Context) error { return Permanent(errGone) }); err != errGone {
			t.Fatalf("err %v, want %v as it was", err, errGone)
		}
	})

	t.Run("op gets ctx", func(t *testing.T) {
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "v")
		err := Do(ctx, Policy{}, func(c context.Context) error {
			if c.Value(key{}) != "v" {
				return errors.New("another ctx")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestMarkers(t *testing.T) {
	if Permanent(nil) != nil || After(nil, time.Second) != nil {
		t.Fatal("a mark on nil is not nil")
	}
	errX := errors.New("x")
	if After(errX, 0) != errX || After(errX, -time.Second) != errX {
		t.Fatal("After without a wait changed the error")
	}
	wrapped := fmt.Errorf("call: %w", Permanent(errX))
	if !IsPermanent(wrapped) || !errors.Is(wrapped, errX) || wrapped.Error() != "call: x" {
		t.Fatalf("wrapped permanent error %v", wrapped)
	}
	if IsPermanent(After(errX, time.Second)) || IsPermanent(errX) {
		t.Fatal("unmarked error reported permanent")
	}
}

func TestRetryableStatus(t *testing.T) {
	for code, want := range map[int]bool{
		200: false, 400: false, 401: false, 403: false, 404: false, 409: false, 422: false,
		408: true, 429: true, 500: true, 502: true, 503: true, 504: true, 599: true,
		501: false, 505: false, 600: false,
	} {
		if got := RetryableStatus(code); got != want {
			t.Errorf("RetryableStatus(%d) = %t, want %t", code, got, want)
		}
	}
}

func TestMarkStatus(t *testing.T) {
	errS := errors.New("status")
	h := http.Header{"Retry-After": {"7"}}
	tests := []struct {
		code      int
		h         http.Header
		permanent bool
		after     time.Duration
	}{
		{400, h, true, 0},
		{501, nil, true, 0},
		{503, h, false, 7 * time.Second},
		{429, http.Header{}, false, 0},
		{500, http.Header{"Retry-After": {"soon"}}, false, 0},
	}
	for _, tc := range tests {
		err := MarkStatus(errS, tc.code, tc.h)
		var ae *after
		var got time.Duration
		if errors.As(err, &ae) {
			got = ae.d
		}
		if IsPermanent(err) != tc.permanent || got != tc.after || !errors.Is(err, errS) {
			t.Errorf("MarkStatus(%d, %v) = %#v: permanent %t, after %v", tc.code, tc.h, err, IsPermanent(err), got)
		}
	}
}

func TestTransient(t *testing.T) {
	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "http://h/x", Err: err} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"caller cancelled", urlErr(context.Canceled), false},
		{"attempt timed out", urlErr(context.DeadlineExceeded), true},
		{"connection refused", urlErr(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"body cut short", fmt.Errorf("read response: %w", io.ErrUnexpectedEOF), true},
		{"server dropped the connection", urlErr(io.EOF), true},
		{"reset, as text only", errors.New("write tcp: connection reset by peer"), true},
		{"host does not resolve", urlErr(&net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}), false},
		{"resolver timed out", urlErr(&net.DNSError{Err: "i/o timeout", Name: "h", IsTimeout: true}), true},
		{"certificate rejected", urlErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), false},
		{"TLS to a plain HTTP server", urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), false},
		{"anything else", errors.New("disk full"), false},
	}
	for _, tc := range tests {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %t, want %t", tc.name, tc.err, got, tc.want)
		}
		if tc.err != nil && IsPermanent(MarkTransport(tc.err)) == tc.want {
			t.Errorf("%s: MarkTransport disagrees with Transient", tc.name)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 7 ", 7 * time.Second},
		{"0", 0},
		{"1.5", 1500 * time.Millisecond},
		{"-3", 0},
		{"soon", 0},
		{"NaN", 0},
		{"1e300", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(2 * time.Hour).Format(time.RFC850), 2 * time.Hour},
	}
	for _, tc := range tests {
		if got := ParseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "5", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "x", "-1", "NaN", "Inf", "1e9"} {
		f.Add(s)
	}
	now := time.Unix(1e9, 0)
	f.Fuzz(func(t *testing.T, v string) {
		if d := ParseRetryAfter(v, now); d < 0 {
			t.Fatalf("negative wait %v for %q", d, v)
		}
	})
}

func ExampleDo() {
	calls := 0
	err := Do(context.Background(), Policy{Attempts: 3, Base: time.Millisecond}, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("busy")
		}
		return nil
	}, OnRetry(func(e Event) { fmt.Println("retrying after attempt", e.Attempt, strings.ToUpper(e.Err.Error())) }))
	fmt.Println(calls, err)
	// Output:
	// retrying after attempt 1 BUSY
	// retrying after attempt 2 BUSY
	// 3 <nil>
}
