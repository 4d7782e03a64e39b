package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/smithy-go"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"
)

// Sentinel errors; test with errors.Is.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists")
	ErrPermission = errors.New("permission denied")
	// ErrInvalidKey is returned before any request for a key that is not a
	// relative slash-separated path, or that uses a reserved name.
	ErrInvalidKey = errors.New("invalid key")
)

// Error is a storage failure on one key of one root. Its message names the
// redacted root URL and the key; the cause is kept for errors.Is/As.
type Error struct {
	Op   string // read, write, list, delete, stat, create
	URL  string // redacted root URL
	Key  string
	Kind error // one of the sentinels, or nil
	Err  error
}

func (e *Error) Error() string {
	loc := e.URL
	if e.Key != "" {
		loc = strings.TrimSuffix(e.URL, "/") + " key " + e.Key
	}
	if e.Kind != nil {
		return fmt.Sprintf("%s %s: %v: %v", e.Op, loc, e.Kind, scrub(e.Err))
	}
	return fmt.Sprintf("%s %s: %v", e.Op, loc, scrub(e.Err))
}

func (e *Error) Unwrap() []error {
	if e.Kind != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Err}
}

// kindOf maps a driver error to one of our sentinels.
func kindOf(err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return ErrNotFound
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return ErrExists
	case gcerrors.PermissionDenied:
		return ErrPermission
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AccessDenied", "Forbidden", "SignatureDoesNotMatch", "InvalidAccessKeyId",
			"InvalidToken", "ExpiredToken", "AllAccessDisabled", "AccountProblem":
			return ErrPermission
		case "NoSuchBucket", "NoSuchKey", "NotFound":
			return ErrNotFound
		}
	}
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return ErrPermission
	}
	return nil
}

// Transient reports whether retrying the operation may succeed: throttling,
// server errors, timeouts and dropped connections. Permanent errors
// (not found, permission, an existing key, a bad request or key, a
// cancelled context) are not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	for _, perm := range []error{ErrNotFound, ErrPermission, ErrExists, ErrInvalidKey} {
		if errors.Is(err, perm) {
			return false
		}
	}
	if kindOf(err) != nil {
		return false
	}
	var ae smithy.APIError
	isAPI := errors.As(err, &ae)
	if isAPI {
		switch ae.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
			"RequestTimeTooSkewed", "InternalError", "ServiceUnavailable", "RequestLimitExceeded",
			"TooManyRequestsException", "ProvisionedThroughputExceededException",
			// S3 answers 409 to the loser of two overlapping conditional
			// writes and asks it to retry; the retry then sees 412.
			"ConditionalRequestConflict", "OperationAborted":
			return true
		}
	}
	// The HTTP status decides before the API error's fault: a 500 or 503
	// without an XML body comes back as a generic error of unknown fault.
	if c := httpStatus(err); c != 0 {
		return c == http.StatusTooManyRequests || c == http.StatusRequestTimeout || c >= 500
	}
	if isAPI {
		return ae.ErrorFault() == smithy.FaultServer
	}
	switch gcerrors.Code(err) {
	case gcerrors.ResourceExhausted, gcerrors.DeadlineExceeded, gcerrors.Internal:
		return true
	case gcerrors.InvalidArgument, gcerrors.Unimplemented, gcerrors.Canceled:
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		// A host that does not exist will not exist on retry either.
		return !dns.IsNotFound
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// An operation (not a reader) that ends in EOF lost its connection.
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection reset", "unexpected EOF", "connection refused", "broken pipe",
		"server closed idle connection", "use of closed network connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// httpStatus digs the HTTP status out of the SDK errors of S3, GCS and
// Azure; 0 when there is none.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	var ze *azcore.ResponseError
	if errors.As(err, &ze) {
		return ze.StatusCode
	}
	return 0
}

// sensitiveParams are URL query parameters that may carry a secret.
var sensitiveParams = []string{"sig", "signature", "token", "secret", "password", "passwd", "key", "credential", "sas", "auth"}

// Redact returns the URL with any user info and secret-looking query values
// replaced, fit for logs, errors and artifacts. A query value that is itself
// a URL (an endpoint) loses its user info too.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	q := u.Query()
	changed := false
	for k, vs := range q {
		lk := strings.ToLower(k)
		secret := false
		for _, s := range sensitiveParams {
			if strings.Contains(lk, s) && lk != "kmskeyid" {
				secret = true
			}
		}
		for i, v := range vs {
			switch {
			case secret:
				vs[i] = "REDACTED"
				changed = true
			case strings.Contains(v, "@"):
				if vu, err := url.Parse(v); err == nil && vu.User != nil {
					vu.User = url.User("REDACTED")
					vs[i] = vu.String()
					changed = true
				}
			}
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// secretInText matches secret-looking query parameters inside free text,
// such as a request URL quoted by a driver error.
var secretInText = regexp.MustCompile(`(?i)((?:x-amz-|x-goog-)?(?:signature|credential|security-token|sig|token|secret|password|sas)=)[^&\s"']+`)

// scrub removes credential-looking material that SDKs sometimes echo back
// (an access key id in a signature error, a presigned query string).
func scrub(err error) string {
	if err == nil {
		return "<nil>"
	}
	msg := err.Error()
	for _, env := range []string{"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET"} {
		if v := getenv(env); len(v) >= 4 {
			msg = strings.ReplaceAll(msg, v, "REDACTED")
		}
	}
	return secretInText.ReplaceAllString(msg, "${1}REDACTED")
}
