package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/whalerun/whale/schemas"
)

// Tool is a native function tool offered to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters map[string]any
}

// Request is one chat completion.
type Request struct {
	Messages []schemas.Message
	// Tools are native function tools; nil for tag-based tools, which the
	// harness parses from the text.
	Tools []Tool
	// Sampling overrides Config.Sampling field by field.
	Sampling Sampling
	// Seed overrides Sampling.Seed; a rollout's seed goes here.
	Seed *int64
	// Extra is merged into the body after Config.Extra, with the same rules.
	Extra map[string]any
}

// Response is the model's answer to one Request.
type Response struct {
	Content string
	// Reasoning is the thinking text when the server's reasoning parser
	// split it from Content (reasoning_content or reasoning); empty
	// otherwise.
	Reasoning    string
	ToolCalls    []schemas.ToolCall
	FinishReason string
	// Model is the model id as the server reports it: the checkpoint that
	// actually answered.
	Model            string
	PromptTokens     int64
	CompletionTokens int64
	// UsageMissing is true when the response had no usage object; the
	// token counts are then 0, not measured.
	UsageMissing bool
	// Latency is the whole call: queueing for a slot, every attempt and the
	// waits between them.
	Latency time.Duration
	// AttemptLatency is the successful attempt alone.
	AttemptLatency time.Duration
	// Endpoint is the redacted base URL that answered.
	Endpoint string
	// Attempts counts HTTP attempts, 1 when the first one succeeded.
	Attempts int
}

// Message returns the response as the assistant message to append to the
// conversation.
func (r *Response) Message() schemas.Message {
	return schemas.Message{Role: "assistant", Content: r.Content, ToolCalls: r.ToolCalls}
}

// Client sends chat completions to one model served by one or more
// endpoints. It is safe for concurrent use.
type Client struct {
	cfg   Config
	key   string
	bal   *balancer
	extra []byte // Config.Extra encoded once, as `,"k":v` pairs
	rnd   func(n int64) int64
	sleep func(ctx context.Context, d time.Duration) error
}

// New validates cfg, reads the API key from the environment and prepares
// one pooled HTTP client shared by all endpoints. It makes no request.
func New(cfg Config) (*Client, error) {
	key, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: newTransport(cfg.Concurrency)}
	}
	c := &Client{
		cfg: cfg,
		key: key,
		bal: &balancer{cool: cfg.Cooldown, logger: cfg.Logger, now: time.Now},
		rnd: rand.Int64N,
		sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
				return nil
			}
		},
	}
	if c.extra, err = encodeExtra(cfg.Extra); err != nil {
		return nil, fmt.Errorf("models: config extra: %w", err)
	}
	for _, e := range cfg.Endpoints {
		opts := []option.RequestOption{
			option.WithBaseURL(e),
			option.WithHTTPClient(hc),
			// Our retry policy spans endpoints; the SDK's would retry one
			// endpoint behind our back and hide the attempts.
			option.WithMaxRetries(0),
			// An explicit key (maybe none) so that OPENAI_API_KEY is never
			// sent to a server it was not meant for.
			option.WithAPIKey(key),
			// Generic requests would send OPENAI_ADMIN_KEY when there is
			// no API key.
			option.WithAdminAPIKey(""),
		}
		c.bal.eps = append(c.bal.eps, &endpoint{
			url: redactURL(e),
			oai: openai.NewClient(opts...),
			sem: make(chan struct{}, cfg.Concurrency),
		})
	}
	return c, nil
}

// newTransport keeps enough idle connections per host for every slot, so
// that a burst of calls does not open and close connections.
func newTransport(perHost int) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   perHost + 4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// Model returns the configured model name (what is asked for; Response.Model
// is what answered).
func (c *Client) Model() string { return c.cfg.Model }

// Chat sends req, retrying transient failures across endpoints, and returns
// the first choice. Failures are *Error.
func (c *Client) Chat(ctx context.Context, req Request) (*Response, error) {
	start := time.Now()
	body, err := c.build(req)
	if err != nil {
		return nil, &Error{Kind: KindBadRequest, Message: c.scrub(err.Error()), Err: err}
	}
	var last *endpoint
	for attempt := 1; ; attempt++ {
		ep, err := c.bal.acquire(ctx, last)
		if err != nil {
			return nil, c.canceled(ctx, last, attempt-1)
		}
		t0 := time.Now()
		res, aerr := c.attempt(ctx, ep, body)
		c.bal.release(ep)
		if aerr == nil {
			c.bal.succeeded(ep)
			res.Latency = time.Since(start)
			res.AttemptLatency = time.Since(t0)
			res.Endpoint = ep.url
			res.Attempts = attempt
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, c.canceled(ctx, ep, attempt)
		}
		if aerr.kind.Retryable() {
			c.bal.failed(ep, aerr.kind, aerr.retryAfter)
		}
		if !aerr.kind.Retryable() || attempt >= c.cfg.Retry.Attempts {
			return nil, &Error{Kind: aerr.kind, Endpoint: ep.url, Status: aerr.status, Attempts: attempt,
				Message: c.scrub(aerr.msg), Err: aerr.err}
		}
		wait := c.backoff(attempt - 1)
		c.cfg.Logger.Debug("models: retrying chat", "endpoint", ep.url, "attempt", attempt,
			"kind", string(aerr.kind), "status", aerr.status, "wait", wait, "err", c.scrub(aerr.msg))
		if err := c.sleep(ctx, wait); err != nil {
			return nil, c.canceled(ctx, ep, attempt)
		}
		last = ep
	}
}

func (c *Client) canceled(ctx context.Context, ep *endpoint, attempts int) error {
	e := &Error{Kind: KindCanceled, Attempts: attempts, Err: context.Cause(ctx)}
	if ep != nil {
		e.Endpoint = ep.url
	}
	if e.Err == nil {
		e.Err = context.Canceled
	}
	e.Message = c.scrub(e.Err.Error())
	return e
}

// build encodes req's body; errors here are the caller's and are not
// retried.
//
// Vendor extras are spliced into the encoded object rather than set with
// option.WithJSONSet: sjson rescans and copies the whole body for every key,
// which cost 10 µs and a 12 KB copy per call on a 12 KB conversation (see
// BenchmarkChatVsBareHTTP).
func (c *Client) build(req Request) ([]byte, error) {
	if len(req.Messages) == 0 {
		return nil, errors.New("request has no messages")
	}
	if err := checkExtra(req.Extra, "request extra"); err != nil {
		return nil, err
	}
	w := wireRequest{Model: c.cfg.Model}
	var err error
	if w.Messages, err = toWire(req.Messages); err != nil {
		return nil, err
	}
	if w.Tools, err = toWireTools(req.Tools); err != nil {
		return nil, err
	}
	s := c.cfg.Sampling.over(req.Sampling)
	if req.Seed != nil {
		s.Seed = req.Seed
	}
	w.Temperature, w.TopP, w.TopK, w.MaxTokens, w.Seed, w.Stop = s.Temperature, s.TopP, s.TopK, s.MaxTokens, s.Seed, s.Stop
	body, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	extra := c.extra
	if len(req.Extra) > 0 {
		merged := maps.Clone(c.cfg.Extra)
		if merged == nil {
			merged = map[string]any{}
		}
		maps.Copy(merged, req.Extra)
		if extra, err = encodeExtra(merged); err != nil {
			return nil, fmt.Errorf("request extra: %w", err)
		}
	}
	if len(extra) > 0 {
		// body is a non-empty JSON object: it ends in '}' and has fields.
		body = append(append(body[:len(body)-1], extra...), '}')
	}
	return body, nil
}

// encodeExtra encodes extras as `,"key":value` pairs in key order.
func encodeExtra(extra map[string]any) ([]byte, error) {
	var out []byte
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(extra[k])
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		out = append(append(append(append(out, ','), kb...), ':'), vb...)
	}
	return out, nil
}

// attempt makes one HTTP call on ep under the per-call timeout.
func (c *Client) attempt(ctx context.Context, ep *endpoint, body []byte) (*Response, *attemptError) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	t := &tap{}
	// The body goes out as bytes and comes back as bytes, decoded once
	// into a lean struct: the SDK's typed params cost four times
	// encoding/json to encode, and its decoder scans the JSON twice
	// (encoding/json, then gjson and reflection). See the benchmark.
	var raw []byte
	err := ep.oai.Post(actx, "chat/completions", body, &raw, option.WithMiddleware(t.wire))
	timedOut := ctx.Err() == nil && actx.Err() != nil
	hres := t.res
	if err != nil {
		if hres != nil && hres.StatusCode >= 400 {
			return nil, c.statusError(hres)
		}
		k := classifyTransport(err, timedOut, hres != nil, t.bodyErr != nil)
		msg := err.Error()
		if k == KindTimeout && timedOut {
			msg = fmt.Sprintf("no answer within %v", c.cfg.Timeout)
		}
		ae := &attemptError{kind: k, msg: msg, err: err}
		if hres != nil {
			ae.status = hres.StatusCode
		}
		return nil, ae
	}
	r, derr := decodeCompletion(raw)
	if derr != nil {
		return nil, &attemptError{kind: KindMalformed, status: statusOf(hres), msg: derr.Error(), err: derr}
	}
	return r, nil
}

var errNoChoices = errors.New("response has no choices")

// tap is the per-attempt middleware between the SDK and net/http.
type tap struct {
	// res is kept because the SDK may fail to parse a non-OpenAI error
	// body (vLLM's has no "error" object) and lose the status.
	res *http.Response
	// bodyErr tells a connection dropped mid-body from a malformed body:
	// both end in "unexpected EOF" once the SDK wraps them.
	bodyErr error
}

// sentHeaders are the request headers an inference server needs; the SDK's
// telemetry headers (X-Stainless-*, OpenAI-Organization/-Project from the
// environment) are dropped.
var sentHeaders = []string{"Content-Type", "Accept", "Authorization", "User-Agent"}

func (t *tap) wire(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	h := make(http.Header, len(sentHeaders))
	for _, k := range sentHeaders {
		if v := r.Header[k]; len(v) > 0 {
			h[k] = v
		}
	}
	r.Header = h
	// The SDK wraps the body in a type net/http does not know to be in
	// memory, which makes it send the headers and the body in two writes
	// (two TCP segments, two reads on the server). A fresh reader over the
	// same bytes goes out in one.
	if r.GetBody != nil && r.Body != nil && r.Body != http.NoBody {
		if b, err := r.GetBody(); err == nil {
			_ = r.Body.Close()
			r.Body = b
		}
	}
	res, err := next(r)
	if res != nil {
		t.res = res
		if res.Body != nil {
			res.Body = &watchedBody{ReadCloser: res.Body, err: &t.bodyErr}
		}
	}
	return res, err
}

// watchedBody records the first read error other than EOF.
type watchedBody struct {
	io.ReadCloser
	err *error
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && *b.err == nil {
		*b.err = err
	}
	return n, err
}

func statusOf(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// statusError reads the error body the SDK kept on the response. The SDK
// may fail to parse a non-OpenAI error body (vLLM's has no "error" object),
// so the status comes from the response, not from its error.
func (c *Client) statusError(hres *http.Response) *attemptError {
	ae := &attemptError{kind: kindForStatus(hres.StatusCode), status: hres.StatusCode}
	if hres.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(hres.Body, 64<<10))
		ae.msg = serverMessage(body)
	}
	if ae.msg == "" {
		ae.msg = http.StatusText(hres.StatusCode)
	}
	if ae.kind == KindRateLimited || hres.StatusCode == http.StatusServiceUnavailable {
		ae.retryAfter = min(parseRetryAfter(hres.Header, time.Now()), max(c.cfg.Retry.Max, time.Minute))
	}
	ae.err = fmt.Errorf("HTTP %d", hres.StatusCode)
	return ae
}

// backoff is the wait before retry n+1: uniform in [0, min(Max, Base·2^n)].
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.Retry.Base << min(n, 30)
	if d <= 0 || d > c.cfg.Retry.Max {
		d = c.cfg.Retry.Max
	}
	return time.Duration(c.rnd(int64(d) + 1))
}

// scrub removes the API key from text that may have echoed it.
func (c *Client) scrub(s string) string {
	if len(c.key) >= 4 {
		s = strings.ReplaceAll(s, c.key, "REDACTED")
	}
	return s
}
