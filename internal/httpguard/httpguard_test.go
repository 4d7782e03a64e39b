package httpguard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestGuardOrder(t *testing.T) {
	var handled int
	h := Guard{
		Token:   "t0k",
		Open:    func(r *http.Request) bool { return r.URL.Path == "/health" },
		JSON:    JSONOnly,
		MaxBody: 10,
		Timeout: time.Second,
		Refuse:  func(w http.ResponseWriter, status int, msg string) { http.Error(w, msg, status) },
	}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		if _, ok := r.Context().Deadline(); !ok {
			t.Error("no deadline on the request's context")
		}
	}))
	for _, tc := range []struct {
		method, path, auth, ct, body string
		want                         int
	}{
		{"POST", "/x", "", "application/json", "{}", 401},
		{"POST", "/x", "Bearer nope", "application/json", "{}", 401},
		{"POST", "/x", "Bearer t0k", "text/plain", "{}", 415}, // after the token: no hint to strangers
		{"POST", "/x", "Bearer t0k", "", "{}", 415},
		{"POST", "/x", "Bearer t0k", "application/json", strings.Repeat("x", 11), 413},
		{"POST", "/x", "Bearer t0k", "application/json; charset=utf-8", "{}", 200},
		{"POST", "/x", "bearer  t0k ", "application/json", "{}", 200},
		{"GET", "/x", "Bearer t0k", "", "", 200},
		{"GET", "/health", "", "", "", 200},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%+v: HTTP %d %s", tc, rec.Code, rec.Body.String())
		}
	}
	if handled != 4 {
		t.Errorf("handler ran %d times, want 4", handled)
	}
}

func TestJSONOrUnset(t *testing.T) {
	for ct, ok := range map[string]bool{"": true, " ": true, "application/json": true, "APPLICATION/JSON;charset=utf-8": true,
		"text/plain": false, "application/x-www-form-urlencoded": false, "multipart/form-data; boundary=a": false, "application/json-seq": false, ";": false} {
		if got := JSONOrUnset.accepts(ct); got != ok {
			t.Errorf("JSONOrUnset.accepts(%q) = %v", ct, got)
		}
		if got := JSONOnly.accepts(ct); got != (ok && strings.TrimSpace(ct) != "") {
			t.Errorf("JSONOnly.accepts(%q) = %v", ct, got)
		}
	}
}

func TestMaxInFlight(t *testing.T) {
	in, out := make(chan struct{}), make(chan struct{})
	h := Guard{MaxInFlight: 2, RetryAfter: 1500 * time.Millisecond, Refuse: func(w http.ResponseWriter, status int, msg string) { http.Error(w, msg, status) }}.
		Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in <- struct{}{}
			<-out
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 2 {
		go http.Get(srv.URL)
		<-in
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("third request: HTTP %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	out <- struct{}{}
	out <- struct{}{}
	go func() { <-in; out <- struct{}{} }()
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the others finished: HTTP %d", resp.StatusCode)
	}
}

func TestNewServerTimeouts(t *testing.T) {
	s := NewServer(http.NotFoundHandler(), Timeouts{Read: 5 * time.Second, Handle: 10 * time.Minute})
	got := fmt.Sprint(s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	if want := fmt.Sprint(5*time.Second, 5*time.Second, 5*time.Second+10*time.Minute+30*time.Second, 2*time.Minute); got != want {
		t.Errorf("timeouts %s, want %s", got, want)
	}
}
