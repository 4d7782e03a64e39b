package retry

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryableStatus reports whether an HTTP error status may pass on
// another try: 408, 429 and 5xx, but not 501 (Not Implemented) or 505
// (HTTP Version Not Supported), which the server will answer again.
func RetryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return true
	case code == http.StatusNotImplemented, code == http.StatusHTTPVersionNotSupported:
		return false
	}
	return code >= 500 && code <= 599
}

// Transient reports whether err, from sending a request or reading its
// answer, may pass on another try: a timeout, a refused, reset or dropped
// connection, an answer cut short. context.Canceled, a host name that does
// not resolve and a certificate the client rejects are not; nor is an
// error of none of these sorts.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
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
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	if errors.As(err, &cert) || errors.As(err, &rec) {
		return false
	}
	// Every error of http.Client.Do is a *url.Error, which is a net.Error.
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// A request (not a reader) that ends in EOF lost its connection.
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

// ParseRetryAfter reads a Retry-After value, seconds or an HTTP date, as
// the wait it asks for from now; 0 when it is empty, unreadable or past.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs >= 0 && secs < 1e9 {
			return time.Duration(secs * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// MarkStatus classifies err, the failure of a request that the server
// answered with status code and header h: Permanent unless
// RetryableStatus(code), and then marked with the answer's Retry-After.
func MarkStatus(err error, code int, h http.Header) error {
	if !RetryableStatus(code) {
		return Permanent(err)
	}
	return After(err, ParseRetryAfter(h.Get("Retry-After"), time.Now()))
}

// MarkTransport classifies err, a request that got no HTTP status (or
// whose body broke off): Permanent unless Transient(err).
func MarkTransport(err error) error {
	if !Transient(err) {
		return Permanent(err)
	}
	return err
}
