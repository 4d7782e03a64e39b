package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/smithy-go"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
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
// server errors, timeouts and dropped connections, as internal/retry
// classifies HTTP statuses and network errors. Permanent errors (not
// found, permission, an existing key, a bad request or key, 501, a
// cancelled context, a host that does not resolve) are not.
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
		return retry.RetryableStatus(c)
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
	// The rest is the network's: timeouts, dropped connections.
	return retry.Transient(err)
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

// scrub is err's text without credential-looking material that SDKs
// sometimes echo back (an access key id in a signature error, a presigned
// query string).
func scrub(err error) string {
	if err == nil {
		return "<nil>"
	}
	return redact.Text(err.Error())
}
