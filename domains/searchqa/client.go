package searchqa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
)

// ClientOptions tune a Client. The zero value is fine.
type ClientOptions struct {
	// HTTPClient sends the requests; nil means a client of its own. Its
	// Timeout, if any, bounds each attempt on top of Timeout below.
	HTTPClient *http.Client
	// Timeout bounds one attempt (request and response body); 0 means 60 s.
	Timeout time.Duration
	// CallTimeout bounds a whole Retrieve call, retries and waits included;
	// 0 means only the caller's context does.
	CallTimeout time.Duration
	// MaxAttempts is how many times one call is tried; 0 means 5.
	MaxAttempts int
	// MinBackoff and MaxBackoff shape the wait before a retry: full jitter
	// under a ceiling that doubles from MinBackoff up to MaxBackoff
	// (internal/retry's Base and Max); 0 means 200 ms and 10 s.
	MinBackoff, MaxBackoff time.Duration
	// MaxResponseBytes caps a response body; 0 means 256 MiB.
	MaxResponseBytes int64
	// Logger receives a warning per retry; nil means slog.Default().
	Logger *slog.Logger
	// APIKeyEnv names the environment variable holding a token sent as
	// "Authorization: Bearer TOKEN" (whale index serve --token-env); the
	// token itself is never part of the options, a message or a log.
	// Empty means no token is sent; a name whose variable is empty or
	// unset is an error of NewClient.
	APIKeyEnv string
}

var (
	_ Retriever = (*Client)(nil)
	_ Retriever = (*Index)(nil)
)

// Client is a Retriever backed by a server speaking the Search-R1
// retrieval API. It is safe for concurrent use.
type Client struct {
	url  string // the /retrieve endpoint
	show string // url without credentials, for messages
	hc   *http.Client
	opts ClientOptions
	log  *slog.Logger
	key  string // bearer token, from APIKeyEnv
}

// NewClient returns a client for the server at baseURL, either its root
// (http://127.0.0.1:8000) or the endpoint itself (.../retrieve).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("retrieval server URL %q: want http(s)://host:port", redact.URL(baseURL))
	}
	if !strings.HasSuffix(u.Path, "/retrieve") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/retrieve"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 256 << 20
	}
	var key string
	if opts.APIKeyEnv != "" {
		if key = strings.TrimSpace(os.Getenv(opts.APIKeyEnv)); key == "" {
			return nil, fmt.Errorf("retrieval server %s: environment variable %s (the API key) is empty or unset", redact.URL(baseURL), opts.APIKeyEnv)
		}
	}
	c := &Client{url: u.String(), show: redact.URL(u.String()), hc: opts.HTTPClient, opts: opts, log: opts.Logger, key: key}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// StatusError is a non-2xx answer from the retrieval server.
type StatusError struct {
	URL    string // redacted
	Status int
	Body   string // the start of the response body
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("retrieval server %s answered %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Transient reports whether retrying may help: 408, 429 and 5xx but 501
// and 505 (internal/retry's RetryableStatus).
func (e *StatusError) Transient() bool { return retry.RetryableStatus(e.Status) }

// Retrieve sends all queries in one request, retrying transient failures
// (connection errors, timeouts of an attempt, 408, 429 and 5xx but 501 and
// 505) with backoff, waiting at least as long as a Retry-After asks (up to
// the larger of MaxBackoff and a minute). Other statuses and a malformed
// response fail at once. A server that returns more than topk passages is
// cut to topk.
func (c *Client) Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error) {
	if topk < 1 {
		return nil, fmt.Errorf("retrieve from %s: topk is %d, want at least 1", c.show, topk)
	}
	if len(queries) == 0 {
		return [][]Passage{}, nil
	}
	if c.opts.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.CallTimeout)
		defer cancel()
	}
	body, err := json.Marshal(wireRequest{Queries: queries, TopK: topk, ReturnScores: true})
	if err != nil {
		return nil, fmt.Errorf("retrieve from %s: encode request: %w", c.show, err)
	}
	var res [][]Passage
	err = retry.Do(ctx, c.policy(), func(ctx context.Context) (err error) {
		res, err = c.try(ctx, body, len(queries))
		return err
	}, retry.OnRetry(func(e retry.Event) {
		c.log.Warn("retrieval request failed; retrying", "url", c.show, "attempt", e.Attempt, "wait", e.Wait, "err", e.Err)
	}))
	if err != nil {
		// A *retry.Error says "gave up after N attempts" or why the
		// retries stopped.
		return nil, fmt.Errorf("retrieve from %s: %w", c.show, err)
	}
	for i := range res {
		if len(res[i]) > topk {
			res[i] = res[i][:topk]
		}
	}
	return res, nil
}

func (c *Client) policy() retry.Policy {
	return retry.Policy{Attempts: c.opts.MaxAttempts, Base: c.opts.MinBackoff, Max: c.opts.MaxBackoff}
}

// try makes one attempt; its error is marked for retry.Do.
func (c *Client) try(ctx context.Context, body []byte, n int) ([][]Passage, error) {
	actx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, retry.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, retry.MarkTransport(redact.Error(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxResponseBytes+1))
	if err != nil {
		return nil, retry.MarkTransport(fmt.Errorf("read response: %w", redact.Error(err)))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &StatusError{URL: c.show, Status: resp.StatusCode, Body: truncate(strings.TrimSpace(string(data)), 300)}
		return nil, retry.MarkStatus(se, resp.StatusCode, resp.Header)
	}
	if int64(len(data)) > c.opts.MaxResponseBytes {
		return nil, retry.Permanent(fmt.Errorf("response is larger than %d bytes", c.opts.MaxResponseBytes))
	}
	res, err := decodeResult(data, n)
	if err != nil {
		return nil, retry.Permanent(err)
	}
	return res, nil
}
