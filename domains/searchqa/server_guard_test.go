package searchqa

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingRetriever holds every call until release is closed or the
// call's context ends; entered is closed by the first call.
type blockingRetriever struct {
	stubRetriever
	entered, release chan struct{}
	once             sync.Once
}

func newBlocking() *blockingRetriever {
	return &blockingRetriever{entered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingRetriever) Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error) {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, fmt.Errorf("search: %w", ctx.Err())
	}
	return b.stubRetriever.Retrieve(ctx, queries, topk)
}

func serve(t *testing.T, r Retriever, opts ServerOptions) string {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	srv := httptest.NewServer(NewServerWithOptions(r, opts))
	t.Cleanup(srv.Close)
	return srv.URL
}

func send(t *testing.T, method, url, contentType, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

// With a token /retrieve needs it as a bearer token (401 otherwise,
// compared in constant time); /health does not. Client sends the token
// that ClientOptions.APIKeyEnv names.
func TestServerToken(t *testing.T) {
	const token = "idx-93b1e7"
	stub := &stubRetriever{}
	url := serve(t, stub, ServerOptions{Token: token})
	body := `{"queries": ["a"], "topk": 1}`
	for _, auth := range []string{"", "Bearer", "Bearer idx-93b1e", "Bearer idx-93b1e70", "Basic " + token, token} {
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		status, text, h := send(t, "POST", url+"/retrieve", "application/json", body, hdr...)
		if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || !strings.Contains(text, "Unauthorized") {
			t.Errorf("Authorization %q: HTTP %d %s, want 401", auth, status, text)
		}
	}
	if stub.calls.Load() != 0 {
		t.Fatalf("the retriever ran %d times without the token", stub.calls.Load())
	}
	if status, text, _ := send(t, "POST", url+"/retrieve", "application/json", body, "Authorization", "Bearer "+token); status != 200 {
		t.Errorf("with the token: HTTP %d %s", status, text)
	}
	if status, _, _ := send(t, "GET", url+"/health", "", ""); status != 200 {
		t.Errorf("/health without the token: HTTP %d", status)
	}

	t.Setenv("WHALE_TEST_INDEX_TOKEN", token)
	c, err := NewClient(url, ClientOptions{APIKeyEnv: "WHALE_TEST_INDEX_TOKEN", MaxAttempts: 1, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Retrieve(context.Background(), []string{"a"}, 1); err != nil {
		t.Errorf("client with the key: %v", err)
	}
	_, err = fastClient(t, url, 3).Retrieve(context.Background(), []string{"a"}, 1)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized || strings.Contains(err.Error(), token) {
		t.Errorf("client without the key: %v, want a 401 that does not show the token", err)
	}
	t.Setenv("WHALE_TEST_INDEX_TOKEN", "")
	if _, err := NewClient(url, ClientOptions{APIKeyEnv: "WHALE_TEST_INDEX_TOKEN"}); err == nil || !strings.Contains(err.Error(), "WHALE_TEST_INDEX_TOKEN") {
		t.Errorf("empty key variable: %v", err)
	}
}

// A body declared as anything but JSON is refused (a browser's
// cross-site post always declares one); one without a Content-Type
// passes, as the reference server takes it.
func TestServerContentType(t *testing.T) {
	stub := &stubRetriever{}
	url := serve(t, stub, ServerOptions{})
	body := `{"queries": ["a"], "topk": 1}`
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		if status, text, _ := send(t, "POST", url+"/retrieve", ct, body); status != http.StatusUnsupportedMediaType || !strings.Contains(text, "application/json") {
			t.Errorf("Content-Type %q: HTTP %d %s, want 415", ct, status, text)
		}
	}
	if stub.calls.Load() != 0 {
		t.Fatalf("the retriever ran for a non-JSON body")
	}
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8"} {
		if status, text, _ := send(t, "POST", url+"/retrieve", ct, body); status != 200 {
			t.Errorf("Content-Type %q: HTTP %d %s", ct, status, text)
		}
	}
}

// One 10.9 MB query once took the server to 2.2 GB: the body cap refuses
// it before it is read, and a query over MaxQueryBytes never reaches the
// index.
func TestServerRequestSize(t *testing.T) {
	stub := &stubRetriever{}
	url := serve(t, stub, ServerOptions{})
	huge := `{"queries": ["` + strings.Repeat("river ", 10_900_000/6) + `"]}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	status, text, _ := send(t, "POST", url+"/retrieve", "application/json", huge)
	runtime.ReadMemStats(&after)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(text, "fewer queries") {
		t.Errorf("%d-byte query: HTTP %d %.200s, want 413", len(huge), status, text)
	}
	// The client's own copies of the body count here too.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*uint64(len(huge)) {
		t.Errorf("%d bytes allocated for a refused %d-byte body", grew, len(huge))
	}
	// Sent without a Content-Length, it is cut at the cap while read.
	req, _ := http.NewRequest("POST", url+"/retrieve", io.MultiReader(strings.NewReader(huge)))
	req.ContentLength = -1
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked %d-byte query: HTTP %d, want 413", len(huge), resp.StatusCode)
		}
	}
	long := strings.Repeat("x", maxQueryBytes+1)
	for _, body := range []string{`{"queries": ["` + long + `"]}`, `{"queries": ["a", "` + long + `"]}`} {
		if status, text, _ := send(t, "POST", url+"/retrieve", "application/json", body); status != http.StatusBadRequest || !strings.Contains(text, "at most 4096 per query") {
			t.Errorf("a %d-byte query: HTTP %d %s, want 400", len(long), status, text)
		}
	}
	many := `{"queries": [` + strings.TrimSuffix(strings.Repeat(`"q",`, 4097), ",") + `]}`
	if status, text, _ := send(t, "POST", url+"/retrieve", "application/json", many); status != http.StatusBadRequest || !strings.Contains(text, "at most 4096 per request") {
		t.Errorf("4097 queries: HTTP %d %s, want 400", status, text)
	}
	if stub.calls.Load() != 0 {
		t.Errorf("the retriever ran %d times for refused requests", stub.calls.Load())
	}
	if status, text, _ := send(t, "POST", url+"/retrieve", "application/json", `{"queries": ["`+long[:maxQueryBytes]+`"], "topk": 1}`); status != 200 {
		t.Errorf("a query of exactly the limit: HTTP %d %s", status, text)
	}
}

// A client that sends its headers and then trickles the body is cut off
// by the read timeout of the server NewHTTPServer makes.
func TestServerSlowBodyCutOff(t *testing.T) {
	srv := NewHTTPServer(&stubRetriever{}, ServerOptions{ReadTimeout: 300 * time.Millisecond, Logger: discardLogger()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	if srv.ReadTimeout != 300*time.Millisecond || srv.WriteTimeout < srv.ReadTimeout+60*time.Second || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 {
		t.Errorf("server timeouts: read header %v, read %v, write %v, idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	for _, headersOnly := range []bool{false, true} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fmt.Fprint(conn, "POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n")
		if !headersOnly {
			fmt.Fprint(conn, "\r\n")
		}
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, _ := io.ReadAll(conn)
		elapsed := time.Since(start)
		close(stop)
		conn.Close()
		if elapsed > 3*time.Second {
			t.Errorf("headers only %v: the connection stayed open %v with a 300ms read timeout", headersOnly, elapsed)
		}
		if !headersOnly && !bytes.Contains(reply, []byte("408")) {
			t.Errorf("slow body: reply %q, want a 408", reply)
		}
	}
}

// Requests beyond MaxInFlight are refused at once with 429 and
// Retry-After; Client waits that out and retries.
func TestServerConcurrencyBound(t *testing.T) {
	b := newBlocking()
	url := serve(t, b, ServerOptions{MaxInFlight: 1})
	done := make(chan error, 1)
	go func() {
		_, err := fastClient(t, url, 1).Retrieve(context.Background(), []string{"held"}, 1)
		done <- err
	}()
	<-b.entered
	for range 3 {
		status, text, h := send(t, "POST", url+"/retrieve", "application/json", `{"queries": ["a"]}`)
		if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(text, "limit") {
			t.Errorf("beyond the bound: HTTP %d %v %s, want 429 with Retry-After", status, h, text)
		}
	}
	if status, _, _ := send(t, "GET", url+"/health", "", ""); status != 200 {
		t.Errorf("/health at the bound: HTTP %d", status)
	}
	// A client retries the 429 and gets through once the slot is free.
	waiting := make(chan error, 1)
	go func() {
		c, _ := NewClient(url, ClientOptions{MaxAttempts: 5, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: discardLogger()})
		_, err := c.Retrieve(context.Background(), []string{"b"}, 1)
		waiting <- err
	}()
	time.Sleep(100 * time.Millisecond)
	close(b.release)
	if err := <-done; err != nil {
		t.Errorf("held request: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("retrying client: %v", err)
	}
}

// A retrieval that outlasts RequestTimeout is stopped (its context ends)
// and answered 503 with Retry-After.
func TestServerRequestTimeout(t *testing.T) {
	b := newBlocking()
	url := serve(t, b, ServerOptions{RequestTimeout: 200 * time.Millisecond})
	start := time.Now()
	status, text, h := send(t, "POST", url+"/retrieve", "application/json", `{"queries": ["a"]}`)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(text, "longer than the server's limit") {
		t.Errorf("HTTP %d %v %s, want 503 with Retry-After", status, h, text)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v with a 200ms timeout", d)
	}
}
