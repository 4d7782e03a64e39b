package s3test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fault is what a FaultProxy does to one request.
type Fault int

const (
	Pass      Fault = iota // forward unchanged
	SlowDown               // 503 with S3's SlowDown error
	Internal               // 500 with an empty body, as a crashed front end sends
	Throttle               // 429 with a plain-text body
	Forbidden              // 403 with S3's AccessDenied error
	Drop                   // close the connection without an answer
	Delay                  // wait the proxy's delay, then forward
)

func (f Fault) String() string {
	return [...]string{"pass", "503 SlowDown", "500 empty", "429", "403 AccessDenied", "drop", "delay"}[f]
}

// FaultProxy is a reverse proxy on loopback in front of an S3 server that
// injects faults into the next requests it sees. It is a fake for fault
// injection only: everything it passes goes to the real server unchanged,
// Host header included, so signatures still match.
type FaultProxy struct {
	URL string // http://127.0.0.1:<port>, an endpoint for URLFor

	mu       sync.Mutex
	queue    []Fault
	delay    time.Duration
	requests atomic.Int64
	faults   atomic.Int64
}

// NewFaultProxy starts a proxy to target (an endpoint such as
// Server.Endpoint) that stops when the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("fault proxy target %q: %v", target, err)
	}
	p := &FaultProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// SigV4 signs the Host the client saw.
			pr.Out.Host = pr.In.Host
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, rp)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Inject makes the next n requests meet fault f, after any queued before.
func (p *FaultProxy) Inject(n int, f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.queue = append(p.queue, f)
	}
}

// SetDelay sets how long a Delay fault holds a request.
func (p *FaultProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Requests is the number of requests seen since the last Reset.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Faults is the number of faults injected since the last Reset.
func (p *FaultProxy) Faults() int64 { return p.faults.Load() }

// Reset clears the counters and any faults not yet injected.
func (p *FaultProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = nil
	p.requests.Store(0)
	p.faults.Store(0)
}

func (p *FaultProxy) next() (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		return Pass, 0
	}
	f := p.queue[0]
	p.queue = p.queue[1:]
	return f, p.delay
}

const s3ErrorXML = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>%s</Message><RequestId>faultproxy</RequestId></Error>`

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	p.requests.Add(1)
	f, delay := p.next()
	if f != Pass {
		p.faults.Add(1)
	}
	if f != Pass && f != Delay {
		// Read the body so that the client sees the answer, not a reset.
		_, _ = io.Copy(io.Discard, r.Body)
	}
	xmlError := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, s3ErrorXML, code, msg)
		}
	}
	switch f {
	case SlowDown:
		xmlError(http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
	case Internal:
		w.WriteHeader(http.StatusInternalServerError)
	case Throttle:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		if r.Method != http.MethodHead {
			io.WriteString(w, "too many requests\n")
		}
	case Forbidden:
		xmlError(http.StatusForbidden, "AccessDenied", "Access Denied")
	case Drop:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("fault proxy: connection cannot be hijacked")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	case Delay:
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		rp.ServeHTTP(w, r)
	default:
		rp.ServeHTTP(w, r)
	}
}
