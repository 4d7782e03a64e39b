package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"google.golang.org/api/googleapi"
)

func s3Status(code int, apiCode string) error {
	var inner error = errors.New("response")
	if apiCode != "" {
		inner = &smithy.GenericAPIError{Code: apiCode, Message: "m"}
	}
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
		Err:      inner,
	}}
}

func TestTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"canceled", context.Canceled, false},
		{"wrapped canceled", fmt.Errorf("op: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, true},
		{"not found", &Error{Kind: ErrNotFound, Err: errors.New("x")}, false},
		{"exists", fmt.Errorf("x: %w", ErrExists), false},
		{"permission", ErrPermission, false},
		{"invalid key", checkKey("../x"), false},
		{"503 SlowDown", s3Status(503, "SlowDown"), true},
		{"500 no body", s3Status(500, "InternalServerError"), true},
		{"502", s3Status(502, ""), true},
		{"429 plain", s3Status(429, "TooManyRequests"), true},
		{"408", s3Status(408, ""), true},
		{"404 NoSuchKey", s3Status(404, "NoSuchKey"), false},
		{"403 AccessDenied", s3Status(403, "AccessDenied"), false},
		{"403 signature", s3Status(403, "SignatureDoesNotMatch"), false},
		{"400 bad request", s3Status(400, "InvalidArgument"), false},
		{"400 RequestTimeout", s3Status(400, "RequestTimeout"), true},
		{"409 conditional conflict", s3Status(409, "ConditionalRequestConflict"), true},
		{"412 precondition", s3Status(412, "PreconditionFailed"), false},
		{"api server fault", &smithy.GenericAPIError{Code: "Weird", Fault: smithy.FaultServer}, true},
		{"api client fault", &smithy.GenericAPIError{Code: "Weird", Fault: smithy.FaultClient}, false},
		{"gcs 503", &googleapi.Error{Code: 503}, true},
		{"gcs 400", &googleapi.Error{Code: 400}, false},
		{"azure 500", &azcore.ResponseError{StatusCode: 500}, true},
		{"azure 409", &azcore.ResponseError{StatusCode: 409, ErrorCode: "Conflict"}, false},
		{"conn reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{"conn refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"unknown host", &net.DNSError{Err: "no such host", Name: "nohost.invalid", IsNotFound: true}, false},
		{"dns timeout", &net.DNSError{Err: "timeout", Name: "h", IsTimeout: true}, true},
		{"unexpected EOF", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), true},
		{"EOF in an operation", fmt.Errorf("Put: %w", io.EOF), true},
		{"message only", errors.New("write: broken pipe"), true},
		{"plain", errors.New("boom"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{s3Status(403, "SignatureDoesNotMatch"), ErrPermission},
		{s3Status(403, "InvalidAccessKeyId"), ErrPermission},
		{s3Status(404, "NoSuchBucket"), ErrNotFound},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, ErrPermission},
		{errors.New("boom"), nil},
	}
	for _, tc := range tests {
		if got := kindOf(tc.err); got != tc.want {
			t.Errorf("kindOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryDo(t *testing.T) {
	transient := s3Status(503, "SlowDown")
	permanent := s3Status(403, "AccessDenied")
	p := RetryPolicy{Attempts: 4, Base: time.Microsecond, Max: time.Millisecond}
	tests := []struct {
		name      string
		failures  []error // returned by the first tries, then nil
		wantCalls int
		wantErr   error
	}{
		{"success", nil, 1, nil},
		{"transient then success", []error{transient, transient}, 3, nil},
		{"permanent at once", []error{permanent, nil}, 1, permanent},
		{"attempts exhausted", []error{transient, transient, transient, transient, transient}, 4, transient},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := p.do(context.Background(), "op", func() error {
				calls++
				if calls <= len(tc.failures) {
					return tc.failures[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("%d calls, err %v; want %d calls, err %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
	t.Run("context ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		slow := RetryPolicy{Attempts: 100, Base: time.Hour, Max: time.Hour}
		start := time.Now()
		err := slow.do(ctx, "op", func() error { return transient })
		if time.Since(start) > 5*time.Second {
			t.Fatal("Do waited past the context")
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, transient) {
			t.Fatalf("err %v, want the last error and the context's", err)
		}
	})
}

func TestScrubAndErrorMessage(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "topsecret-value-123")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATESTKEY42")
	cause := errors.New(`GET "http://h/b/k?X-Amz-Signature=abc123def&X-Amz-Credential=AKIATESTKEY42%2F20240101": SignatureDoesNotMatch for AKIATESTKEY42 with topsecret-value-123`)
	e := &Error{Op: "read", URL: "s3://b?region=r", Key: "runs/r1/run.json", Kind: ErrPermission, Err: cause}
	msg := e.Error()
	for _, bad := range []string{"topsecret-value-123", "AKIATESTKEY42", "abc123def"} {
		if strings.Contains(msg, bad) {
			t.Errorf("message %q holds %q", msg, bad)
		}
	}
	for _, want := range []string{"read", "s3://b?region=r", "runs/r1/run.json", "permission denied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(e, ErrPermission) || !errors.Is(e, cause) {
		t.Error("Error does not unwrap to its kind and cause")
	}
}

func TestCheckKey(t *testing.T) {
	good := []string{"a", "runs/r1/run.json", "a/b/c.d.e", "x.tmp", "x.1.tmp", "x.cafe.tmp", "sp ace/é", ".hidden", "a..b"}
	bad := []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", ".whale-tmp", "x/.whale-tmp/y",
		"m.attrs", "f.17f0123456789abc.tmp", "\xff"}
	for _, k := range good {
		if err := checkKey(k); err != nil {
			t.Errorf("checkKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range bad {
		if err := checkKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("checkKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a//b", ".whale-tmp/x", "x.attrs", "é/ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if checkKey(key) != nil {
			return
		}
		// An accepted key is one every backend stores under the same name.
		if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "//") {
			t.Fatalf("accepted %q", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "." || seg == ".." || seg == localTmp {
				t.Fatalf("accepted %q", key)
			}
		}
		if isLocalTemp(key) {
			t.Fatalf("accepted %q, which List on file:// would hide", key)
		}
	})
}
