// Package httpguard is what whale's HTTP servers (whale local serve, whale
// index serve) put in front of their handlers, so that a client cannot tie
// them up and a web page cannot drive them:
//
//   - an optional bearer token, compared in constant time (401 without it);
//   - a JSON-only rule for request bodies (415 otherwise), which also keeps
//     browsers' "simple" cross-site posts (text/plain, forms) out;
//   - a cap on the request body (413, early when Content-Length says so;
//     handlers map *http.MaxBytesError to 413 for the rest);
//   - a bound on requests being handled at once, refused beyond it with
//     429 and Retry-After rather than queued without end;
//   - a deadline on each request's context;
//
// and NewServer sets the http.Server timeouts that bound a connection
// (slow headers, slow bodies, idle keep-alives) around that deadline.
//
// Refusals are written by the server's own Refuse function, so each keeps
// its error body format. Requests for which Open reports true (health
// probes) skip the token and the bound.
package httpguard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// JSONPolicy says which request bodies a Guard accepts.
type JSONPolicy int

const (
	// AnyBody accepts any Content-Type.
	AnyBody JSONPolicy = iota
	// JSONOnly refuses a POST, PUT or PATCH whose Content-Type is not
	// application/json (parameters such as charset allowed), as vLLM does.
	JSONOnly
	// JSONOrUnset is JSONOnly, but a request without a Content-Type
	// passes: scripts that post JSON without saying so keep working,
	// while every body a browser posts cross-site carries a type.
	JSONOrUnset
)

// UnsupportedMediaType is the message of a 415, vLLM's own.
const UnsupportedMediaType = "Unsupported Media Type: Only 'application/json' is allowed"

// Guard wraps a handler with the checks above. The zero value checks
// nothing; Refuse is required when any check is on.
type Guard struct {
	// Token, when not empty, must come as "Authorization: Bearer TOKEN".
	Token string
	// Open reports the requests that skip the token and the bound
	// (health probes); nil means none.
	Open func(*http.Request) bool
	// JSON is the Content-Type rule for bodies.
	JSON JSONPolicy
	// MaxBody, when positive, caps a request body: a larger Content-Length
	// is refused at once, and the body reader stops after MaxBody bytes
	// with an *http.MaxBytesError.
	MaxBody int64
	// MaxInFlight bounds the requests being handled at once; more are
	// refused with 429 and Retry-After. 0 means no bound.
	MaxInFlight int
	// RetryAfter is sent with a 429; 0 means one second.
	RetryAfter time.Duration
	// Timeout, when positive, is the deadline of each request's context
	// (the handler answers when it passes; see TimedOut).
	Timeout time.Duration
	// Refuse writes a refusal in the server's error format.
	Refuse func(w http.ResponseWriter, status int, msg string)
}

// Wrap returns h behind g's checks: token, Content-Type, body size, then
// the bound on requests in flight and the deadline.
func (g Guard) Wrap(h http.Handler) http.Handler {
	var want [sha256.Size]byte
	if g.Token != "" {
		want = sha256.Sum256([]byte(g.Token))
	}
	var slots chan struct{}
	if g.MaxInFlight > 0 {
		slots = make(chan struct{}, g.MaxInFlight)
	}
	retryAfter := g.RetryAfter
	if retryAfter <= 0 {
		retryAfter = time.Second
	}
	retrySecs := strconv.Itoa(int(max(1, (retryAfter+time.Second-1)/time.Second)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := g.Open != nil && g.Open(r)
		if g.Token != "" && !open && !bearerMatches(r, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="whale"`)
			g.Refuse(w, http.StatusUnauthorized, "Unauthorized: send the server's token as \"Authorization: Bearer TOKEN\"")
			return
		}
		if hasBody(r.Method) && !g.JSON.accepts(r.Header.Get("Content-Type")) {
			g.Refuse(w, http.StatusUnsupportedMediaType, UnsupportedMediaType)
			return
		}
		if g.MaxBody > 0 {
			if r.ContentLength > g.MaxBody {
				w.Header().Set("Connection", "close")
				g.Refuse(w, http.StatusRequestEntityTooLarge, TooLarge(g.MaxBody))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, g.MaxBody)
		}
		if slots != nil && !open {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			default:
				w.Header().Set("Retry-After", retrySecs)
				g.Refuse(w, http.StatusTooManyRequests, fmt.Sprintf("the server is handling %d requests, its limit; retry later", g.MaxInFlight))
				return
			}
		}
		if g.Timeout > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), g.Timeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// TooLarge is the message of a 413 for a body over limit bytes.
func TooLarge(limit int64) string {
	return fmt.Sprintf("request body is larger than %d bytes", limit)
}

// TimedOut reports whether the request's own deadline passed (as opposed
// to the client going away).
func TimedOut(r *http.Request) bool {
	return r.Context().Err() == context.DeadlineExceeded
}

func hasBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

func (p JSONPolicy) accepts(contentType string) bool {
	if p == AnyBody || (p == JSONOrUnset && strings.TrimSpace(contentType) == "") {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// bearerMatches compares the request's bearer token with the wanted one
// by their SHA-256 digests, so the comparison takes the same time
// whatever the length or content of what was sent.
func bearerMatches(r *http.Request, want [sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Timeouts are the connection limits of a server made by NewServer.
type Timeouts struct {
	// Read bounds reading one request, headers and body; 0 means 30 s.
	// Headers alone get at most 10 s.
	Read time.Duration
	// Handle is the longest a handler takes (its Guard.Timeout); the
	// write deadline is Read + Handle + 30 s, so a reply that comes in
	// time is never cut. 0 means 60 s.
	Handle time.Duration
	// Idle bounds a keep-alive connection between requests; 0 means 2 min.
	Idle time.Duration
}

// Defaults returns t with zero fields set to their defaults.
func (t Timeouts) Defaults() Timeouts {
	if t.Read <= 0 {
		t.Read = 30 * time.Second
	}
	if t.Handle <= 0 {
		t.Handle = 60 * time.Second
	}
	if t.Idle <= 0 {
		t.Idle = 2 * time.Minute
	}
	return t
}

// NewServer is an http.Server for h with t's timeouts: a client that
// sends its headers or body slowly is cut off after Read, one that holds
// a connection open without a request after Idle.
func NewServer(h http.Handler, t Timeouts) *http.Server {
	t = t.Defaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(t.Read, 10*time.Second),
		ReadTimeout:       t.Read,
		// net/http starts the write deadline once the headers are read:
		// it covers the body, the handler and the reply.
		WriteTimeout:   t.Read + t.Handle + 30*time.Second,
		IdleTimeout:    t.Idle,
		MaxHeaderBytes: 64 << 10,
	}
}
