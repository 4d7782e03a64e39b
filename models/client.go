package models

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/models/openai"
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
	// ToolChoice is sent with Tools when set: auto, none, required, or the
	// name of the one tool the model must call.
	ToolChoice string
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
	// StopReason is the stop sequence that ended the reply when the server
	// says so (vLLM's stop_reason); such servers leave it out of Content.
	StopReason string
	// PromptTokenIDs and TokenIDs are the token ids of the prompt and of
	// the completion when the server returns them (vLLM with
	// return_token_ids: true, e.g. in model.extra); nil otherwise.
	PromptTokenIDs, TokenIDs []int32
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
	return schemas.Message{Role: "assistant", Content: r.Content, ToolCalls: r.ToolCalls, Reasoning: r.Reasoning}
}

// Client sends chat completions to one model served by one or more
// endpoints. It is safe for concurrent use.
type Client struct {
	cfg   Config
	key   string
	hc    *http.Client
	bal   *balancer
	extra []byte // Config.Extra encoded once, as `,"k":v` pairs
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
	}
	if c.extra, err = encodeExtra(cfg.Extra); err != nil {
		return nil, fmt.Errorf("models: config extra: %w", err)
	}
	c.hc = sameOriginClient(hc)
	for _, e := range cfg.Endpoints {
		u, err := chatURL(e)
		if err != nil {
			return nil, fmt.Errorf("models: endpoint %s: %w", redact.URL(e), err)
		}
		c.bal.eps = append(c.bal.eps, &endpoint{
			url:    redact.URL(e),
			chat:   u,
			header: requestHeader(key),
			sem:    make(chan struct{}, cfg.Concurrency),
		})
	}
	return c, nil
}

// userAgent names the client to servers, as the OpenAI SDK's would.
const userAgent = "whale-models/1"

// chatURL is base + "chat/completions", resolved the way the OpenAI SDKs
// do: the base URL's path is a directory whether or not it ends in "/".
func chatURL(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	if u.Path != "" && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	// Parsed again from its string form, and an empty port dropped, as
	// http.NewRequest would do for every call.
	c, err := url.Parse(u.JoinPath("chat/completions").String())
	if err != nil {
		return nil, err
	}
	c.Host = strings.TrimSuffix(c.Host, ":")
	return c, nil
}

// requestHeader is the header of every request to an endpoint: only what a
// server needs (no SDK telemetry, no OPENAI_* settings from the
// environment), with the bearer token when there is a key.
func requestHeader(key string) http.Header {
	h := http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"application/json"},
		// Replies are small; asking for them uncompressed also spares
		// net/http a header map and a gzip reader per call.
		"Accept-Encoding": {"identity"},
		"User-Agent":      {userAgent},
	}
	if key != "" {
		h["Authorization"] = []string{"Bearer " + key}
	}
	return h
}

// sameOriginClient is hc that follows redirects only within the origin of
// the first request, so that the bearer token never reaches another host.
func sameOriginClient(hc *http.Client) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if o := via[0].URL; req.URL.Scheme != o.Scheme || req.URL.Host != o.Host {
			return fmt.Errorf("redirect to another origin (%s://%s) refused", req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
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
	var (
		last     *endpoint // the endpoint of the latest attempt
		lastErr  *attemptError
		attempts int
		res      *Response
		t0       time.Time
	)
	err = retry.Do(ctx, c.cfg.Retry, func(ctx context.Context) error {
		ep, err := c.bal.acquire(ctx, last)
		if err != nil {
			return err // only when ctx ended
		}
		last, attempts, t0 = ep, attempts+1, time.Now()
		r, aerr := c.attempt(ctx, ep, body)
		c.bal.release(ep)
		if aerr == nil {
			c.bal.succeeded(ep)
			res = r
			return nil
		}
		lastErr = aerr
		if ctx.Err() != nil {
			return aerr
		}
		if !aerr.kind.Retryable() {
			return retry.Permanent(aerr)
		}
		// A Retry-After bars this endpoint in the balancer; the next
		// attempt may go to another one meanwhile, so it is no wait here.
		c.bal.failed(ep, aerr.kind, aerr.retryAfter)
		return aerr
	}, retry.OnRetry(func(e retry.Event) {
		c.cfg.Logger.Debug("models: retrying chat", "endpoint", last.url, "attempt", e.Attempt,
			"kind", string(lastErr.kind), "status", lastErr.status, "wait", e.Wait, "err", c.scrub(lastErr.msg))
	}))
	switch {
	case err == nil:
		res.Latency = time.Since(start)
		res.AttemptLatency = time.Since(t0)
		res.Endpoint = last.url
		res.Attempts = attempts
		return res, nil
	case ctx.Err() != nil:
		return nil, c.canceled(ctx, last, attempts)
	}
	return nil, &Error{Kind: lastErr.kind, Endpoint: last.url, Status: lastErr.status, Attempts: attempts,
		Message: c.scrub(lastErr.msg), Err: lastErr.err}
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
// retried. Vendor extras are spliced into the encoded object: they are
// top-level keys of any name and JSON value, which a struct cannot hold.
func (c *Client) build(req Request) ([]byte, error) {
	if len(req.Messages) == 0 {
		return nil, errors.New("request has no messages")
	}
	if err := checkExtra(req.Extra, "request extra"); err != nil {
		return nil, err
	}
	w := openai.ChatRequest{Model: c.cfg.Model}
	var err error
	if w.Messages, err = toWire(req.Messages); err != nil {
		return nil, err
	}
	if w.Tools, err = toWireTools(req.Tools); err != nil {
		return nil, err
	}
	if len(w.Tools) > 0 {
		w.ToolChoice = openai.ToolChoice(req.ToolChoice)
	}
	s := c.cfg.Sampling.over(req.Sampling)
	if req.Seed != nil {
		s.Seed = req.Seed
	}
	w.Temperature, w.TopP, w.TopK, w.MaxTokens, w.Seed, w.Stop = s.Temperature, s.TopP, s.TopK, s.MaxTokens, s.Seed, s.Stop
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
	body, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	// The object ends in '}': splice the extras in before it.
	return append(append(body[:len(body)-1], extra...), '}'), nil
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
//
// It goes straight to net/http: the body is already encoded, and the
// reply is read up to MaxReplyBytes and decoded once.
func (c *Client) attempt(ctx context.Context, ep *endpoint, body []byte) (*Response, *attemptError) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	// The URL was parsed once in New; parsing it again for every call was
	// a tenth of the attempt's CPU. An empty URL parses for free, and the
	// request gets its own copy of the endpoint's.
	req, err := http.NewRequestWithContext(actx, http.MethodPost, "", bytes.NewReader(body))
	if err != nil {
		return nil, &attemptError{kind: KindBadRequest, msg: err.Error(), err: err}
	}
	u := *ep.chat
	req.URL, req.Host = &u, u.Host
	req.Header = ep.header
	if c.hc.Jar != nil {
		// A cookie jar adds to the request's header.
		req.Header = ep.header.Clone()
	}
	hres, err := c.hc.Do(req)
	if err != nil {
		// net/http's error quotes the request URL, query and all.
		return nil, c.transportError(ctx, actx, redact.Error(err), nil, false)
	}
	defer hres.Body.Close()
	if hres.StatusCode >= 400 {
		return nil, c.statusError(hres)
	}
	reply, err := io.ReadAll(io.LimitReader(hres.Body, MaxReplyBytes+1))
	if err != nil {
		return nil, c.transportError(ctx, actx, fmt.Errorf("read response body: %w", err), hres, true)
	}
	if len(reply) > MaxReplyBytes {
		err := fmt.Errorf("response body larger than %d bytes", MaxReplyBytes)
		return nil, &attemptError{kind: KindMalformed, status: hres.StatusCode, msg: err.Error(), err: err}
	}
	r, derr := decodeCompletion(reply)
	if derr != nil {
		return nil, &attemptError{kind: KindMalformed, status: hres.StatusCode, msg: derr.Error(), err: derr}
	}
	return r, nil
}

// transportError classifies an attempt that failed without an HTTP error
// status; hres is the response when its headers arrived.
func (c *Client) transportError(ctx, actx context.Context, err error, hres *http.Response, bodyBroken bool) *attemptError {
	timedOut := ctx.Err() == nil && actx.Err() != nil
	k := classifyTransport(err, timedOut, hres != nil, bodyBroken)
	msg := err.Error()
	if k == KindTimeout && timedOut {
		msg = fmt.Sprintf("no answer within %v", c.cfg.Timeout)
	}
	ae := &attemptError{kind: k, msg: msg, err: err}
	if hres != nil {
		ae.status = hres.StatusCode
	}
	return ae
}

// MaxReplyBytes bounds a reply body that the client reads: a reply of
// 32k tokens with their token ids is well under a megabyte, and a server
// that streams without end must not take the process's memory.
const MaxReplyBytes = 64 << 20

var errNoChoices = errors.New("response has no choices")

// statusError reads an error response: its status, and the message of its
// body whatever its form (OpenAI's, vLLM's, FastAPI's or plain text).
func (c *Client) statusError(hres *http.Response) *attemptError {
	ae := &attemptError{kind: kindForStatus(hres.StatusCode), status: hres.StatusCode}
	if hres.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(hres.Body, 64<<10))
		ae.msg = serverMessage(body)
	}
	if ae.msg == "" {
		ae.msg = http.StatusText(hres.StatusCode)
	}
	if ae.kind.Retryable() {
		ae.retryAfter = min(retry.ParseRetryAfter(hres.Header.Get("Retry-After"), time.Now()), c.cfg.Retry.RetryAfterCap())
	}
	ae.err = fmt.Errorf("HTTP %d", hres.StatusCode)
	return ae
}

// scrub removes the API key from text that may have echoed it.
func (c *Client) scrub(s string) string {
	if len(c.key) >= 4 {
		s = strings.ReplaceAll(s, c.key, "REDACTED")
	}
	return s
}
