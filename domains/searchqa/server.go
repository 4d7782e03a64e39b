package searchqa

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/whalerun/whale/internal/httpguard"
)

// ServerOptions tune the handler NewServerWithOptions returns. The zero
// value is fine.
type ServerOptions struct {
	DefaultTopK int // topk when a request leaves it out; 0 means 3, Search-R1's default
	MaxTopK     int // largest topk accepted; 0 means 100
	MaxQueries  int // most queries in one request; 0 means 4096
	// MaxQueryBytes bounds one query; 0 means 4096, the limit the searchqa
	// domain puts on the queries its episodes send.
	MaxQueryBytes int
	// MaxBodyBytes bounds a request body (413 past it); 0 means 1 MiB,
	// room for a few thousand queries of ordinary length.
	MaxBodyBytes int64
	// MaxInFlight bounds the requests being answered at once; more are
	// refused with 429 and Retry-After, which Client waits out. 0 means 64.
	MaxInFlight int
	// RequestTimeout bounds answering one request; past it the answer is
	// 503 with Retry-After. 0 means 60 s, Client's own attempt timeout.
	RequestTimeout time.Duration
	// ReadTimeout bounds reading one request, headers and body, on the
	// server NewHTTPServer makes; 0 means 30 s.
	ReadTimeout time.Duration
	// Token, when set, must come as "Authorization: Bearer TOKEN" with
	// every request but GET /health (401 otherwise); see
	// ClientOptions.APIKeyEnv.
	Token  string
	Logger *slog.Logger
}

func (opts ServerOptions) withDefaults() ServerOptions {
	if opts.DefaultTopK <= 0 {
		opts.DefaultTopK = 3
	}
	if opts.MaxTopK <= 0 {
		opts.MaxTopK = 100
	}
	opts.DefaultTopK = min(opts.DefaultTopK, opts.MaxTopK)
	if opts.MaxQueries <= 0 {
		opts.MaxQueries = 4096
	}
	if opts.MaxQueryBytes <= 0 {
		opts.MaxQueryBytes = maxQueryBytes
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 64
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 60 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return opts
}

// NewServer serves the Search-R1 retrieval API from r with default options:
// POST /retrieve, and GET /health for probes.
func NewServer(r Retriever) http.Handler { return NewServerWithOptions(r, ServerOptions{}) }

// NewServerWithOptions is NewServer with limits of the caller's choosing.
// Before a request reaches /retrieve it passes the token check (401), a
// Content-Type check (a body declared as anything but application/json
// is 415; one without a Content-Type passes, as the reference server
// takes it), the body cap (413) and the bound on requests in flight (429
// with Retry-After); its retrieval then runs under RequestTimeout.
func NewServerWithOptions(r Retriever, opts ServerOptions) http.Handler {
	opts = opts.withDefaults()
	s := &server{r: r, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("/retrieve", s.retrieve)
	mux.HandleFunc("/health", func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return httpguard.Guard{
		Token:       opts.Token,
		Open:        func(r *http.Request) bool { return r.URL.Path == "/health" },
		JSON:        httpguard.JSONOrUnset,
		MaxBody:     opts.MaxBodyBytes,
		MaxInFlight: opts.MaxInFlight,
		Timeout:     opts.RequestTimeout,
		Refuse: func(w http.ResponseWriter, status int, msg string) {
			switch status {
			case http.StatusRequestEntityTooLarge:
				msg += "; send fewer queries per request"
			case http.StatusUnsupportedMediaType:
				msg += ": send the body with Content-Type: application/json"
			}
			writeJSON(w, status, errorBody{msg})
		},
	}.Wrap(mux)
}

// NewHTTPServer is an http.Server answering NewServerWithOptions(r, opts)
// with connection limits to match: headers within 10 s, the whole request
// within ReadTimeout, the reply within ReadTimeout + RequestTimeout + 30 s,
// and idle keep-alive connections closed after 2 minutes.
func NewHTTPServer(r Retriever, opts ServerOptions) *http.Server {
	opts = opts.withDefaults()
	return httpguard.NewServer(NewServerWithOptions(r, opts), httpguard.Timeouts{Read: opts.ReadTimeout, Handle: opts.RequestTimeout})
}

type server struct {
	r    Retriever
	opts ServerOptions
}

type errorBody struct {
	Error string `json:"error"`
}

func (s *server) retrieve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"use POST /retrieve with a JSON body {\"queries\": [...], \"topk\": 3, \"return_scores\": true}"})
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, req.Body, s.opts.MaxBodyBytes)); err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{httpguard.TooLarge(s.opts.MaxBodyBytes) + "; send fewer queries per request"})
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusRequestTimeout, errorBody{"the request body did not arrive in time"})
		default:
			writeJSON(w, http.StatusBadRequest, errorBody{"read request body: " + err.Error()})
		}
		return
	}
	queries, topks, scores, err := s.parse(buf.Bytes())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	maxK := 0
	for _, k := range topks {
		maxK = max(maxK, k)
	}
	var res [][]Passage
	if len(queries) > 0 {
		res, err = s.r.Retrieve(req.Context(), queries, maxK)
		if err == nil && len(res) != len(queries) {
			err = fmt.Errorf("retriever returned %d result lists for %d queries", len(res), len(queries))
		}
		if err != nil && req.Context().Err() != nil {
			if httpguard.TimedOut(req) {
				s.opts.Logger.Warn("retrieval timed out", "queries", len(queries), "timeout", s.opts.RequestTimeout)
				w.Header().Set("Retry-After", "1")
				writeJSON(w, http.StatusServiceUnavailable, errorBody{fmt.Sprintf("retrieval of %d queries took longer than the server's limit of %v; send fewer queries per request or retry later", len(queries), s.opts.RequestTimeout)})
			}
			return // else the client went away
		}
		if err != nil {
			s.opts.Logger.Error("retrieval failed", "queries", len(queries), "err", err)
			writeJSON(w, http.StatusInternalServerError, errorBody{"retrieval failed: " + err.Error()})
			return
		}
	}
	out := make([][]any, len(queries))
	for i := range queries {
		ps := res[i]
		if len(ps) > topks[i] {
			ps = ps[:topks[i]]
		}
		items := make([]any, len(ps))
		for j, p := range ps {
			d := wireDoc{ID: p.ID, Contents: p.Contents}
			if scores {
				items[j] = wireScored{Document: d, Score: p.Score}
			} else {
				items[j] = d
			}
		}
		out[i] = items
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": out})
}

// parse validates a request body and returns the queries, one topk per
// query, and whether to return scores. Unknown fields are ignored, as the
// reference server (pydantic) does.
func (s *server) parse(body []byte) ([]string, []int, bool, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, nil, false, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	rawQ, ok := fields["queries"]
	if !ok || isNull(rawQ) {
		return nil, nil, false, fmt.Errorf("field \"queries\" is required: a list of query strings")
	}
	var queries []string
	if err := json.Unmarshal(rawQ, &queries); err != nil {
		return nil, nil, false, fmt.Errorf("field \"queries\" must be a list of strings: %v", err)
	}
	if len(queries) > s.opts.MaxQueries {
		return nil, nil, false, fmt.Errorf("field \"queries\" has %d queries; at most %d per request", len(queries), s.opts.MaxQueries)
	}
	for i, q := range queries {
		if len(q) > s.opts.MaxQueryBytes {
			return nil, nil, false, fmt.Errorf("query %d is %d bytes; at most %d per query", i, len(q), s.opts.MaxQueryBytes)
		}
	}
	topks := make([]int, len(queries))
	for i := range topks {
		topks[i] = s.opts.DefaultTopK
	}
	if raw, ok := fields["topk"]; ok && !isNull(raw) {
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '[' {
			var list []*int
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, nil, false, fmt.Errorf("field \"topk\" must be an integer or a list of integers: %v", err)
			}
			if len(list) != len(queries) {
				return nil, nil, false, fmt.Errorf("field \"topk\" lists %d values for %d queries", len(list), len(queries))
			}
			for i, k := range list {
				if k != nil {
					topks[i] = *k
				}
			}
		} else {
			var k int
			if err := json.Unmarshal(raw, &k); err != nil {
				return nil, nil, false, fmt.Errorf("field \"topk\" must be an integer or a list of integers: %v", err)
			}
			for i := range topks {
				topks[i] = k
			}
		}
		for i, k := range topks {
			if k < 1 || k > s.opts.MaxTopK {
				return nil, nil, false, fmt.Errorf("field \"topk\" is %d for query %d; want 1 to %d", k, i, s.opts.MaxTopK)
			}
		}
	}
	scores := false
	if raw, ok := fields["return_scores"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &scores); err != nil {
			return nil, nil, false, fmt.Errorf("field \"return_scores\" must be true or false: %v", err)
		}
	}
	return queries, topks, scores, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
