package searchqa

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	// MinBackoff and MaxBackoff bound the wait before a retry, which doubles
	// from MinBackoff with jitter; 0 means 200 ms and 10 s.
	MinBackoff, MaxBackoff time.Duration
	// MaxResponseBytes caps a response body; 0 means 256 MiB.
	MaxResponseBytes int64
	// Logger receives a warning per retry; nil means slog.Default().
	Logger *slog.Logger
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
}

// NewClient returns a client for the server at baseURL, either its root
// (http://127.0.0.1:8000) or the endpoint itself (.../retrieve).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("retrieval server URL %q: want http(s)://host:port", redactURL(baseURL))
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
	c := &Client{url: u.String(), show: u.Redacted(), hc: opts.HTTPClient, opts: opts, log: opts.Logger}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparseable URL)"
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

// Transient reports whether retrying may help: server errors, 408 and 429.
func (e *StatusError) Transient() bool {
	return e.Status >= 500 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests
}

// Retrieve sends all queries in one request, retrying transient failures
// (connection errors, timeouts of an attempt, 408, 429 and 5xx) with
// backoff. A 4xx or a malformed response fails at once. A server that
// returns more than topk passages is cut to topk.
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
	var last error
	for attempt := 1; ; attempt++ {
		res, retryAfter, err := c.try(ctx, body, len(queries))
		if err == nil {
			for i := range res {
				if len(res[i]) > topk {
					res[i] = res[i][:topk]
				}
			}
			return res, nil
		}
		last = err
		if ctx.Err() != nil {
			return nil, fmt.Errorf("retrieve from %s: %w (last error: %v)", c.show, ctx.Err(), last)
		}
		if !transient(err) {
			return nil, fmt.Errorf("retrieve from %s: %w", c.show, err)
		}
		if attempt >= c.opts.MaxAttempts {
			return nil, fmt.Errorf("retrieve from %s: gave up after %d attempts: %w", c.show, attempt, last)
		}
		wait := c.backoff(attempt)
		if retryAfter > wait {
			wait = min(retryAfter, c.opts.MaxBackoff)
		}
		c.log.Warn("retrieval request failed; retrying", "url", c.show, "attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("retrieve from %s: %w (last error: %v)", c.show, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// permanentError marks failures that a retry cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func transient(err error) bool {
	var pe permanentError
	if errors.As(err, &pe) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Transient()
	}
	// Transport errors and a body cut off mid-read: the server may be
	// restarting or overloaded.
	return true
}

func (c *Client) try(ctx context.Context, body []byte, n int) ([][]Passage, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, permanentError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, scrubURLError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxResponseBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read response: %w", scrubURLError(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, retryAfter(resp.Header.Get("Retry-After")), &StatusError{URL: c.show, Status: resp.StatusCode, Body: truncate(strings.TrimSpace(string(data)), 300)}
	}
	if int64(len(data)) > c.opts.MaxResponseBytes {
		return nil, 0, permanentError{fmt.Errorf("response is larger than %d bytes", c.opts.MaxResponseBytes)}
	}
	res, err := decodeResult(data, n)
	if err != nil {
		return nil, 0, permanentError{err}
	}
	return res, 0, nil
}

// scrubURLError drops the URL that net/http puts in its errors: we name the
// redacted endpoint ourselves, and the raw one may carry credentials.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", strings.ToLower(ue.Op), ue.Err)
	}
	return err
}

func retryAfter(h string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// backoff is the wait after failed attempt n (1-based): exponential from
// MinBackoff, capped at MaxBackoff, with jitter over its upper half so that
// many workers hitting one restarting server spread out.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.MinBackoff
	for i := 1; i < n && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.opts.MaxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}
