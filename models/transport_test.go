package models_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// The chat URL is resolved against the base URL as the OpenAI SDKs do,
// whether or not the base ends in a slash.
func TestChatURL(t *testing.T) {
	cases := []struct{ base, path string }{
		{"/v1", "/v1/chat/completions"},
		{"/v1/", "/v1/chat/completions"},
		{"/proxy/openai/v1", "/proxy/openai/v1/chat/completions"},
		{"", "/chat/completions"},
	}
	for _, tc := range cases {
		t.Run(tc.base, func(t *testing.T) {
			var got atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Store(r.Method + " " + r.URL.Path + " " + r.Header.Get("Accept-Encoding") + " " + r.Header.Get("Content-Type"))
				_, _ = io.WriteString(w, `{"model":"m","choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`)
			}))
			defer srv.Close()
			c := newClient(t, models.Config{Endpoints: []string{srv.URL + tc.base}})
			if _, err := c.Chat(context.Background(), hello()); err != nil {
				t.Fatal(err)
			}
			if want := "POST " + tc.path + " identity application/json"; got.Load() != want {
				t.Errorf("request %q, want %q", got.Load(), want)
			}
		})
	}
}

// A redirect to another origin would carry the bearer token there: it is
// refused, and the other server never sees the call.
func TestRedirectToAnotherOriginRefused(t *testing.T) {
	t.Setenv("WHALE_TEST_API_KEY", "sk-redirect-test-key")
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c := newClient(t, models.Config{Endpoints: []string{srv.URL + "/v1"}, APIKeyEnv: "WHALE_TEST_API_KEY"})
	_, err := c.Chat(context.Background(), hello())
	if err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("err %v, want a refused redirect", err)
	}
	if leaked.Load() != 0 {
		t.Errorf("the other origin saw %d calls", leaked.Load())
	}
}

// A same-origin redirect is followed.
func TestSameOriginRedirectFollowed(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "moved"}))
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old/chat/completions" {
			http.Redirect(w, r, "/new/chat/completions", http.StatusPermanentRedirect)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, srv.URL+"/chat/completions", r.Body)
		req.Header = r.Header
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	defer front.Close()
	c := newClient(t, models.Config{Endpoints: []string{front.URL + "/old"}})
	res, err := c.Chat(context.Background(), hello())
	if err != nil || res.Content != "moved" {
		t.Fatalf("Chat = %+v, %v", res, err)
	}
}
