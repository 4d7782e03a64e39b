package models

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
)

// Config is how a Client reaches its model. Zero values take the defaults
// noted on each field.
type Config struct {
	// Endpoints are OpenAI-compatible base URLs, e.g. http://host:8000/v1;
	// "/chat/completions" is appended. At least one.
	Endpoints []string
	// Model is the model name sent in every request. Required.
	Model string
	// APIKeyEnv names the environment variable that holds the API key; the
	// key itself is never part of a Config. Empty means no key is sent
	// (OPENAI_API_KEY is ignored too, so a key meant for one service is not
	// sent to another).
	APIKeyEnv string
	// Concurrency bounds the calls in flight per endpoint. Default 32.
	Concurrency int
	// Timeout bounds one HTTP attempt (not the queueing before it, nor the
	// retries after). Default 10 minutes: long generations are slow.
	Timeout time.Duration
	// Retry is the retry policy for transient failures.
	Retry RetryPolicy
	// Cooldown is how endpoints that keep failing are skipped.
	Cooldown CooldownPolicy
	// Sampling holds the decoding defaults; a Request may override each
	// field. Unset fields are left to the server.
	Sampling Sampling
	// Extra is merged into every request body (top_k, min_p,
	// repetition_penalty, chat_template_kwargs, …). Keys that a typed field
	// owns (model, messages, tools, temperature, top_p, top_k, max_tokens,
	// seed, stop, stream) are rejected: set them through Sampling.
	Extra map[string]any
	// HTTPClient replaces the client's own pooled HTTP client (proxies,
	// tests). Its timeout should be zero: Timeout bounds each attempt.
	HTTPClient *http.Client
	// Logger receives retry (debug) and cool-down (warn) events. Default
	// slog.Default().
	Logger *slog.Logger
}

// RetryPolicy retries transient failures with exponential backoff from Base,
// capped at Max, with full jitter, for at most Attempts tries in all
// (internal/retry's policy). Zero fields take the defaults: 5 attempts
// (1 means no retry), Base 250ms, Max 10s. A Retry-After on a retryable
// answer bars that endpoint for as long (at most the larger of Max and one
// minute); other endpoints keep serving meanwhile.
type RetryPolicy = retry.Policy

// CooldownPolicy takes an endpoint out of rotation for Duration after
// Failures consecutive transient failures. When every endpoint is cooling
// down, calls wait for the first to come back rather than fail.
type CooldownPolicy struct {
	Failures int           // default 3
	Duration time.Duration // default 10s
}

// Sampling holds decoding parameters; nil means "not set".
type Sampling struct {
	Temperature *float64
	TopP        *float64
	// TopK is not part of OpenAI's schema; it is sent as the body field
	// top_k, which vLLM, SGLang, llama.cpp and Ollama understand.
	TopK      *int
	MaxTokens *int64
	Seed      *int64
	// Stop sequences; nil means "not set".
	Stop []string
}

// Ptr returns a pointer to v, for the optional fields of Sampling.
func Ptr[T any](v T) *T { return &v }

// over returns s with every field that o sets replaced by o's.
func (s Sampling) over(o Sampling) Sampling {
	if o.Temperature != nil {
		s.Temperature = o.Temperature
	}
	if o.TopP != nil {
		s.TopP = o.TopP
	}
	if o.TopK != nil {
		s.TopK = o.TopK
	}
	if o.MaxTokens != nil {
		s.MaxTokens = o.MaxTokens
	}
	if o.Seed != nil {
		s.Seed = o.Seed
	}
	if o.Stop != nil {
		s.Stop = o.Stop
	}
	return s
}

const (
	defaultConcurrency = 32
	defaultTimeout     = 10 * time.Minute
	defaultAttempts    = 5
	defaultBase        = 250 * time.Millisecond
	defaultMax         = 10 * time.Second
	defaultCoolFails   = 3
	defaultCoolFor     = 10 * time.Second
)

// ownedKeys are body fields that typed parameters set; an Extra with one of
// these names would silently fight them.
var ownedKeys = []string{"model", "messages", "tools", "tool_choice", "temperature", "top_p", "top_k",
	"max_tokens", "max_completion_tokens", "seed", "stop", "stream"}

func checkExtra(extra map[string]any, where string) error {
	for k := range extra {
		if k == "" {
			return fmt.Errorf("%s: empty key", where)
		}
		if slices.Contains(ownedKeys, k) {
			return fmt.Errorf("%s: key %q is set through Sampling or Request, not Extra", where, k)
		}
	}
	return nil
}

// withDefaults validates c and fills its zero fields. It returns the API key
// read from the environment.
func (c *Config) withDefaults() (string, error) {
	if len(c.Endpoints) == 0 {
		return "", errors.New("models: config has no endpoints")
	}
	for i, e := range c.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("models: endpoint %d (%s): want an http(s) base URL such as http://host:8000/v1", i, redact.URL(e))
		}
	}
	if strings.TrimSpace(c.Model) == "" {
		return "", errors.New("models: config has no model")
	}
	if c.Concurrency < 0 || c.Timeout < 0 || c.Retry.Attempts < 0 || c.Retry.Base < 0 || c.Retry.Max < 0 ||
		c.Cooldown.Failures < 0 || c.Cooldown.Duration < 0 {
		return "", errors.New("models: config has a negative concurrency, timeout, retry or cooldown value")
	}
	if err := checkExtra(c.Extra, "models: config extra"); err != nil {
		return "", err
	}
	var key string
	if c.APIKeyEnv != "" {
		key = os.Getenv(c.APIKeyEnv)
		if key == "" {
			return "", fmt.Errorf("models: environment variable %s (APIKeyEnv) is empty or unset", c.APIKeyEnv)
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.Retry.Attempts == 0 {
		c.Retry.Attempts = defaultAttempts
	}
	if c.Retry.Base == 0 {
		c.Retry.Base = defaultBase
	}
	if c.Retry.Max == 0 {
		c.Retry.Max = defaultMax
	}
	if c.Cooldown.Failures == 0 {
		c.Cooldown.Failures = defaultCoolFails
	}
	if c.Cooldown.Duration == 0 {
		c.Cooldown.Duration = defaultCoolFor
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return key, nil
}
