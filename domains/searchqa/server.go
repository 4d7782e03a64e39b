package searchqa

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// ServerOptions tune the handler NewServerWithOptions returns. The zero
// value is fine.
type ServerOptions struct {
	DefaultTopK  int   // topk when a request leaves it out; 0 means 3, Search-R1's default
	MaxTopK      int   // largest topk accepted; 0 means 100
	MaxQueries   int   // most queries in one request; 0 means 4096
	MaxBodyBytes int64 // largest request body; 0 means 16 MiB
	Logger       *slog.Logger
}

// NewServer serves the Search-R1 retrieval API from r with default options:
// POST /retrieve, and GET /health for probes.
func NewServer(r Retriever) http.Handler { return NewServerWithOptions(r, ServerOptions{}) }

// NewServerWithOptions is NewServer with limits of the caller's choosing.
func NewServerWithOptions(r Retriever, opts ServerOptions) http.Handler {
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
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &server{r: r, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("/retrieve", s.retrieve)
	mux.HandleFunc("/health", func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
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
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{fmt.Sprintf("request body is larger than %d bytes; send fewer queries per request", s.opts.MaxBodyBytes)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{"read request body: " + err.Error()})
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
