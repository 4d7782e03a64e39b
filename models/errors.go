package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/retry"
)

// Kind classifies a failed call so the episode loop can record it and the
// run loop can decide what to do.
type Kind string

const (
	KindRateLimited Kind = "rate_limited" // 429
	KindServerError Kind = "server_error" // 5xx but 501 and 505
	KindTimeout     Kind = "timeout"      // an attempt ran past Config.Timeout, or 408
	KindConnection  Kind = "connection"   // refused, reset, dropped
	KindMalformed   Kind = "malformed"    // body not JSON, truncated, no choices
	KindBadRequest  Kind = "bad_request"  // 400, 404, 422, other 4xx, 501, 505, or a request that cannot be sent (a host that does not resolve, a certificate refused)
	KindAuth        Kind = "auth"         // 401, 403
	KindCanceled    Kind = "canceled"     // the caller's context ended
)

// Retryable reports whether another attempt may succeed.
func (k Kind) Retryable() bool {
	switch k {
	case KindRateLimited, KindServerError, KindTimeout, KindConnection, KindMalformed:
		return true
	}
	return false
}

// Error is a failed Chat call. Its message names the kind, the redacted
// endpoint of the last attempt, the HTTP status if any, the attempt count and
// what the server said (cut to a few hundred bytes), never the API key.
type Error struct {
	Kind     Kind
	Endpoint string // redacted base URL of the last attempt; empty if none was made
	Status   int    // HTTP status of the last attempt; 0 when there was no response
	Attempts int
	// Message is what went wrong, with any credential scrubbed.
	Message string
	// Err is the cause, kept for errors.Is (context.Canceled,
	// context.DeadlineExceeded, syscall errors). Print Error() rather than
	// Err: the SDK's errors carry the HTTP request.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("models: chat")
	if e.Endpoint != "" {
		b.WriteString(" via ")
		b.WriteString(e.Endpoint)
	}
	b.WriteString(": ")
	b.WriteString(string(e.Kind))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	fmt.Fprintf(&b, " after %d attempt", e.Attempts)
	if e.Attempts != 1 {
		b.WriteString("s")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of an error from Chat, or "" for an error that is
// not one.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// attemptError is the outcome of one failed attempt before it becomes an
// *Error: the kind, status, message and any wait the server asked for.
type attemptError struct {
	kind       Kind
	status     int
	msg        string
	retryAfter time.Duration
	err        error
}

func (e *attemptError) Error() string { return e.msg }

// kindForStatus maps an HTTP error status to a Kind.
func kindForStatus(code int) Kind {
	switch {
	case code == http.StatusTooManyRequests:
		return KindRateLimited
	case code == http.StatusRequestTimeout:
		return KindTimeout
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return KindAuth
	case code >= 500 && retry.RetryableStatus(code):
		return KindServerError
	default:
		return KindBadRequest
	}
}

// classifyTransport maps an error that came without an HTTP error status.
// hadResponse says whether response headers arrived, bodyBroken whether
// reading the body then failed in transit.
func classifyTransport(err error, attemptTimedOut, hadResponse, bodyBroken bool) Kind {
	var ne net.Error
	switch {
	case attemptTimedOut || errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case hadResponse && bodyBroken:
		return KindConnection
	case hadResponse:
		// The body arrived whole but is not a chat completion.
		return KindMalformed
	case errors.As(err, &ne) && ne.Timeout():
		return KindTimeout
	case !retry.Transient(err):
		return KindBadRequest
	}
	return KindConnection
}

// serverMessage extracts a readable message from an error body: OpenAI's
// {"error":{"message"}}, vLLM's {"message"}, FastAPI's {"detail"}, or the
// text itself.
func serverMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &s) == nil && s != "":
			msg = s
		case v.Message != "":
			msg = v.Message
		case len(v.Detail) > 0:
			if json.Unmarshal(v.Detail, &s) == nil {
				msg = s
			} else {
				msg = string(v.Detail)
			}
		}
	}
	if msg == "" {
		msg = string(body)
	}
	return clip(strings.TrimSpace(msg), 300)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
