package searchqa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func fastClient(t *testing.T, url string, attempts int) *Client {
	t.Helper()
	c, err := NewClient(url, ClientOptions{MaxAttempts: attempts, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Timeout: 2 * time.Second, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientServerRoundTrip(t *testing.T) {
	x := testIndex(t)
	srv := httptest.NewServer(NewServer(x))
	defer srv.Close()
	ctx := context.Background()
	queries := []string{"longest river in Africa", "Python programming language", "qqqnothingqqq", "Mohs hardness"}
	want, err := x.Retrieve(ctx, queries, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/retrieve"} {
		got, err := fastClient(t, base, 1).Retrieve(ctx, queries, 3)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: over HTTP\n%+v\ndirect\n%+v", base, got, want)
		}
	}
	if !slices.ContainsFunc(want[0], func(p Passage) bool { return p.Title == "Nile" }) || len(want[2]) != 0 {
		t.Errorf("unexpected direct results %+v", want)
	}
	got, err := fastClient(t, srv.URL, 1).Retrieve(ctx, nil, 3)
	if err != nil || len(got) != 0 {
		t.Errorf("no queries: %v, %v", got, err)
	}
}

// FakeRetrievalServer answers /retrieve with canned passages after
// injecting the faults queued in Faults, one per request.
type FakeRetrievalServer struct {
	Faults   []string // "503", "429", "400", "drop" (close the connection), "slow" (outlast the timeout), "garbage", "short"
	Requests atomic.Int32
	srv      *httptest.Server
	Result   string // body on success; default: one document per query
}

func NewFakeRetrievalServer(t *testing.T, faults ...string) *FakeRetrievalServer {
	f := &FakeRetrievalServer{Faults: faults}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *FakeRetrievalServer) serve(w http.ResponseWriter, r *http.Request) {
	n := int(f.Requests.Add(1)) - 1
	var req wireRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	fault := ""
	if n < len(f.Faults) {
		fault = f.Faults[n]
	}
	switch fault {
	case "503":
		w.Header().Set("Retry-After", "0")
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		return
	case "429":
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	case "400":
		http.Error(w, `{"error": "topk must be positive"}`, http.StatusBadRequest)
		return
	case "drop":
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "slow":
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	case "garbage":
		w.Write([]byte("<html>not json</html>"))
		return
	case "short":
		w.Write([]byte(`{"result": []}`))
		return
	}
	if f.Result != "" {
		w.Write([]byte(f.Result))
		return
	}
	res := make([][]wireScored, len(req.Queries))
	for i, q := range req.Queries {
		res[i] = []wireScored{{Document: wireDoc{ID: fmt.Sprint(i), Contents: "\"" + q + "\"\nabout " + q}, Score: float64(req.TopK)}}
	}
	json.NewEncoder(w).Encode(map[string]any{"result": res})
}

func TestClientRetries(t *testing.T) {
	tests := []struct {
		name     string
		faults   []string
		attempts int
		wantErr  string // "" means success
		wantReqs int32
	}{
		{"ok", nil, 3, "", 1},
		{"503 then ok", []string{"503", "503"}, 3, "", 3},
		{"429 then ok", []string{"429"}, 3, "", 2},
		{"dropped connection then ok", []string{"drop"}, 3, "", 2},
		{"attempt timeout then ok", []string{"slow"}, 3, "", 2},
		{"gives up", []string{"503", "503", "503"}, 3, "gave up after 3 attempts", 3},
		{"400 is permanent", []string{"400"}, 3, "answered 400", 1},
		{"garbage is permanent", []string{"garbage"}, 3, "not JSON", 1},
		{"wrong result count is permanent", []string{"short"}, 3, "0 result lists for 2 queries", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFakeRetrievalServer(t, tc.faults...)
			c, err := NewClient(f.srv.URL, ClientOptions{MaxAttempts: tc.attempts, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
				Timeout: 300 * time.Millisecond, Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Retrieve(context.Background(), []string{"alpha", "beta"}, 4)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if len(res) != 2 || res[1][0].Title != "beta" || res[1][0].Text() != "about beta" || res[1][0].Score != 4 {
					t.Errorf("res = %+v", res)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			if got := f.Requests.Load(); got != tc.wantReqs {
				t.Errorf("server saw %d requests, want %d", got, tc.wantReqs)
			}
		})
	}
}

func TestClientCancelDuringBackoff(t *testing.T) {
	f := NewFakeRetrievalServer(t, "503", "503", "503", "503")
	c, err := NewClient(f.srv.URL, ClientOptions{MaxAttempts: 5, MinBackoff: time.Minute, MaxBackoff: time.Minute, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Retrieve(ctx, []string{"x"}, 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "503") {
		t.Errorf("err = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Retrieve waited %v after its context ended", time.Since(start))
	}
}

func TestClientCallTimeout(t *testing.T) {
	f := NewFakeRetrievalServer(t, "slow", "slow", "slow", "slow")
	c, err := NewClient(f.srv.URL, ClientOptions{MaxAttempts: 5, Timeout: time.Minute, CallTimeout: 100 * time.Millisecond, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Retrieve(context.Background(), []string{"x"}, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("call took %v with a 100ms call timeout", d)
	}
}

func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{`{"result": [[{"document": {"id": "1", "contents": "T\nx"}, "score": 1}]]}`, `{"result": [[{"id": 2, "title": "a", "text": "b"}]]}`, `{"result": []}`, `null`, `{"result": [null]}`} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, body string, n int) {
		if n < 0 || n > 8 {
			return
		}
		res, err := decodeResult([]byte(body), n)
		if err != nil {
			return
		}
		if len(res) != n {
			t.Fatalf("%d result lists for %d queries", len(res), n)
		}
		for _, ps := range res {
			for _, p := range ps {
				if p.Title != "" && !strings.Contains(p.Contents, p.Title) && !strings.Contains(body, p.Title) {
					t.Fatalf("title %q from nowhere", p.Title)
				}
			}
		}
	})
}

// FuzzServerRequest: whatever the body, Content-Type and Authorization
// header, /retrieve answers JSON with 200 or an error message (400, 401,
// 413, 415), never a panic; a 200 needs the token and a JSON (or
// undeclared) body, and the retriever only ever sees queries within the
// limits.
func FuzzServerRequest(f *testing.F) {
	const token = "tok"
	for _, s := range []string{`{"queries": ["a"], "topk": 2, "return_scores": true}`, `{"queries": ["a", "b"], "topk": [1, null]}`, `{"queries": []}`, `{}`, `[]`,
		`{"queries": ["0123456789abcdefX"]}`, `{"queries": ["a","b","c","d","e"]}`, `{"queries": ["` + strings.Repeat("é", 9) + `"]}`} {
		for _, ct := range []string{"", "application/json", "text/plain"} {
			for _, auth := range []string{"Bearer " + token, "", "Bearer tok2", "bearer tok"} {
				f.Add(s, ct, auth)
			}
		}
	}
	stub := &limitRecorder{}
	h := NewServerWithOptions(stub, ServerOptions{MaxTopK: 4, MaxQueries: 4, MaxQueryBytes: 16, MaxBodyBytes: 512, Token: token, Logger: discardLogger()})
	f.Fuzz(func(t *testing.T, body, contentType, auth string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/retrieve", strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		var out struct {
			Result []json.RawMessage `json:"result"`
			Error  string            `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("status %d: body is not JSON: %q", rec.Code, rec.Body.String())
		}
		switch rec.Code {
		case 200:
			if out.Result == nil {
				t.Fatalf("200 without result: %s", rec.Body.String())
			}
			if scheme, tok, _ := strings.Cut(req.Header.Get("Authorization"), " "); !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) != token {
				t.Fatalf("200 with Authorization %q", req.Header.Get("Authorization"))
			}
			if mt := strings.TrimSpace(strings.ToLower(strings.Split(contentType, ";")[0])); mt != "" && mt != "application/json" {
				t.Fatalf("200 for Content-Type %q", contentType)
			}
		case 400, 401, 413, 415:
			if out.Error == "" {
				t.Fatalf("%d without an error message", rec.Code)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if n, l := stub.maxQueries.Load(), stub.maxLen.Load(); n > 4 || l > 16 {
			t.Fatalf("the retriever saw %d queries, one of %d bytes", n, l)
		}
	})
}

// limitRecorder is a stubRetriever that remembers the most queries and
// the longest query it was given.
type limitRecorder struct {
	stubRetriever
	maxQueries, maxLen atomic.Int64
}

func (l *limitRecorder) Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error) {
	for {
		if old := l.maxQueries.Load(); int64(len(queries)) <= old || l.maxQueries.CompareAndSwap(old, int64(len(queries))) {
			break
		}
	}
	for _, q := range queries {
		for {
			if old := l.maxLen.Load(); int64(len(q)) <= old || l.maxLen.CompareAndSwap(old, int64(len(q))) {
				break
			}
		}
	}
	return l.stubRetriever.Retrieve(ctx, queries, topk)
}

func TestClientDecodesSearchR1Variants(t *testing.T) {
	tests := []struct {
		name, body string
		want       []Passage
	}{
		{"scored", `{"result": [[{"document": {"id": "12", "contents": "\"Aaron\"\nAaron is a prophet."}, "score": 7.5}]]}`,
			[]Passage{{ID: "12", Title: "Aaron", Contents: "\"Aaron\"\nAaron is a prophet.", Score: 7.5}}},
		{"without scores", `{"result": [[{"id": 3, "contents": "T\nbody"}, {"id": "4", "contents": "U"}]]}`,
			[]Passage{{ID: "3", Title: "T", Contents: "T\nbody"}, {ID: "4", Title: "U", Contents: "U"}}},
		{"bm25 server layout", `{"result": [[{"document": {"title": "Aaron", "text": "Aaron is a prophet.", "contents": "\"Aaron\"\nAaron is a prophet."}, "score": 1}]]}`,
			[]Passage{{Title: "Aaron", Contents: "\"Aaron\"\nAaron is a prophet.", Score: 1}}},
		{"title and text only", `{"result": [[{"title": "T", "text": "body"}]]}`,
			[]Passage{{Title: "T", Contents: "T\nbody"}}},
		{"extra fields and null score", `{"result": [[{"document": {"id": "1", "contents": "A", "url": "x"}, "score": null}]], "took": 3}`,
			[]Passage{{ID: "1", Title: "A", Contents: "A"}}},
		{"more than topk is cut", `{"result": [[{"contents": "A"}, {"contents": "B"}, {"contents": "C"}]]}`,
			[]Passage{{Title: "A", Contents: "A"}, {Title: "B", Contents: "B"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFakeRetrievalServer(t)
			f.Result = tc.body
			res, err := fastClient(t, f.srv.URL, 1).Retrieve(context.Background(), []string{"q"}, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res[0], tc.want) {
				t.Errorf("got %+v\nwant %+v", res[0], tc.want)
			}
		})
	}
	for _, body := range []string{`{"result": [[{"document": "x"}]]}`, `{"result": [[{"id": "1"}]]}`, `{"result": [[{"contents": 5}]]}`, `{"result": [{"a": 1}]}`, `{"other": 1}`} {
		f := NewFakeRetrievalServer(t)
		f.Result = body
		if _, err := fastClient(t, f.srv.URL, 3).Retrieve(context.Background(), []string{"q"}, 2); err == nil {
			t.Errorf("body %s accepted", body)
		} else if f.Requests.Load() != 1 {
			t.Errorf("body %s: retried a malformed response", body)
		}
	}
}

func TestClientHidesCredentials(t *testing.T) {
	if _, err := NewClient("ftp://user:hunter2@host/", ClientOptions{}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad scheme: err = %v", err)
	}
	f := NewFakeRetrievalServer(t, "400")
	u := strings.Replace(f.srv.URL, "http://", "http://user:hunter2@", 1)
	c := fastClient(t, u, 1)
	_, err := c.Retrieve(context.Background(), []string{"q"}, 1)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("err = %v", err)
	}
	// A connection error names the URL too; it must be the redacted one.
	c = fastClient(t, "http://user:hunter2@127.0.0.1:1/", 1)
	_, err = c.Retrieve(context.Background(), []string{"q"}, 1)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("err = %v", err)
	}
}

type stubRetriever struct {
	err   error
	calls atomic.Int32
	lastK atomic.Int32
}

func (s *stubRetriever) Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error) {
	s.calls.Add(1)
	s.lastK.Store(int32(topk))
	if s.err != nil {
		return nil, s.err
	}
	out := make([][]Passage, len(queries))
	for i, q := range queries {
		for j := range topk {
			out[i] = append(out[i], Passage{ID: fmt.Sprintf("%d-%d", i, j), Title: q, Contents: q + "\ntext", Score: float64(10 - j)})
		}
	}
	return out, nil
}

func TestServerRequests(t *testing.T) {
	stub := &stubRetriever{}
	h := NewServerWithOptions(stub, ServerOptions{MaxTopK: 5, MaxQueries: 3, MaxBodyBytes: 200, Logger: discardLogger()})
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string // substring of the response body
	}{
		{"scores", "POST", "/retrieve", `{"queries": ["a"], "topk": 2, "return_scores": true}`, 200,
			`{"result":[[{"document":{"id":"0-0","contents":"a\ntext"},"score":10},{"document":{"id":"0-1","contents":"a\ntext"},"score":9}]]}`},
		{"no scores", "POST", "/retrieve", `{"queries": ["a"], "topk": 1}`, 200, `{"result":[[{"id":"0-0","contents":"a\ntext"}]]}`},
		{"default topk", "POST", "/retrieve", `{"queries": ["a"]}`, 200, `"id":"0-2"`},
		{"topk list", "POST", "/retrieve", `{"queries": ["a", "b"], "topk": [1, null]}`, 200,
			`{"result":[[{"id":"0-0","contents":"a\ntext"}],[{"id":"1-0","contents":"b\ntext"},{"id":"1-1","contents":"b\ntext"},{"id":"1-2","contents":"b\ntext"}]]}`},
		{"empty queries", "POST", "/retrieve", `{"queries": []}`, 200, `{"result":[]}`},
		{"unknown fields ignored", "POST", "/retrieve", `{"queries": ["a"], "topk": 1, "mode": "x"}`, 200, `"0-0"`},
		{"health", "GET", "/health", ``, 200, `"ok"`},
		{"GET retrieve", "GET", "/retrieve", ``, 405, "use POST"},
		{"not JSON", "POST", "/retrieve", `queries=a`, 400, "not a JSON object"},
		{"no queries", "POST", "/retrieve", `{"topk": 3}`, 400, `"queries\" is required`},
		{"queries not strings", "POST", "/retrieve", `{"queries": [1]}`, 400, "must be a list of strings"},
		{"queries a string", "POST", "/retrieve", `{"queries": "a"}`, 400, "must be a list of strings"},
		{"too many queries", "POST", "/retrieve", `{"queries": ["a","b","c","d"]}`, 400, "at most 3"},
		{"topk zero", "POST", "/retrieve", `{"queries": ["a"], "topk": 0}`, 400, "want 1 to 5"},
		{"topk too big", "POST", "/retrieve", `{"queries": ["a"], "topk": 6}`, 400, "want 1 to 5"},
		{"topk float", "POST", "/retrieve", `{"queries": ["a"], "topk": 2.5}`, 400, "integer"},
		{"topk list length", "POST", "/retrieve", `{"queries": ["a"], "topk": [1, 2]}`, 400, "2 values for 1 queries"},
		{"return_scores string", "POST", "/retrieve", `{"queries": ["a"], "return_scores": "yes"}`, 400, "true or false"},
		{"body too large", "POST", "/retrieve", `{"queries": ["` + strings.Repeat("x", 300) + `"]}`, 413, "larger than 200 bytes"},
		{"other path", "POST", "/search", `{}`, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tc.status || !strings.Contains(string(body), tc.want) {
				t.Errorf("status %d body %s; want %d and %q", rec.Code, body, tc.status, tc.want)
			}
			if rec.Code == 400 && !json.Valid(body) {
				t.Errorf("error body is not JSON: %s", body)
			}
		})
	}
	// One call for the whole list, asking for the largest topk.
	stub.calls.Store(0)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/retrieve", strings.NewReader(`{"queries": ["a", "b"], "topk": [2, 4]}`)))
	if stub.calls.Load() != 1 || stub.lastK.Load() != 4 {
		t.Errorf("retriever called %d times with topk %d", stub.calls.Load(), stub.lastK.Load())
	}
}

func TestServerRetrieverFailure(t *testing.T) {
	h := NewServerWithOptions(&stubRetriever{err: errors.New("index closed")}, ServerOptions{Logger: discardLogger()})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/retrieve", strings.NewReader(`{"queries": ["a"]}`)))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "index closed") {
		t.Errorf("status %d body %s", rec.Code, rec.Body.String())
	}
	// A client sees a 500 as transient and retries it.
	srv := httptest.NewServer(h)
	defer srv.Close()
	if _, err := fastClient(t, srv.URL, 2).Retrieve(context.Background(), []string{"a"}, 1); err == nil || !strings.Contains(err.Error(), "gave up after 2 attempts") {
		t.Errorf("err = %v", err)
	}
}

func TestConcurrentRetrieval(t *testing.T) {
	x := testIndex(t)
	srv := httptest.NewServer(NewServerWithOptions(x, ServerOptions{Logger: discardLogger()}))
	defer srv.Close()
	c := fastClient(t, srv.URL, 2)
	ctx := context.Background()
	qs := readQuestions(t)
	errs := make(chan error, 2*len(qs))
	for _, q := range qs {
		for _, r := range []Retriever{x, c} {
			go func() {
				res, err := r.Retrieve(ctx, []string{q.Hops[0].Query}, 3)
				if err == nil && !slices.ContainsFunc(res[0], func(p Passage) bool { return p.ID == q.Hops[0].Doc }) {
					err = fmt.Errorf("%s: doc %s not found concurrently", q.ID, q.Hops[0].Doc)
				}
				errs <- err
			}()
		}
	}
	for range 2 * len(qs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
