package mathdomain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
)

// ErrSandbox marks a failure of the code service itself (unreachable,
// 5xx, SandboxError) that persisted through the retries.
var ErrSandbox = errors.New("code sandbox failed")

// SandboxFusionOptions configure a SandboxFusion client. Zero values mean
// the defaults.
type SandboxFusionOptions struct {
	// URL of the service: its base (http://host:8080) or the full
	// run_code endpoint. Credentials in it are never logged or returned in
	// errors.
	URL string
	// Language of the programs; default "python".
	Language string
	// RunTimeout is sent as run_timeout; default 10s.
	RunTimeout time.Duration
	// MemoryLimitMB is sent as memory_limit_MB; default 1024, negative
	// for the service's default (no limit).
	MemoryLimitMB int
	// CallTimeout bounds one HTTP attempt; default RunTimeout + 10s, so
	// the service's own time limit is reached first.
	CallTimeout time.Duration
	// Retries is how many times a failed attempt (connection error,
	// timeout, HTTP 408, 429 or 5xx but 501 and 505, SandboxError) is
	// repeated; default 3, negative for none.
	Retries int
	// Backoff is the ceiling of the wait before the first retry, doubled
	// for each next one up to 10s (or Backoff, if longer), with full
	// jitter (internal/retry); default 500ms. A Retry-After is waited for,
	// up to a minute.
	Backoff time.Duration
	// MaxOutputBytes caps each of stdout and stderr; default 64 KiB.
	MaxOutputBytes int
	// Header is added to every request (an Authorization token, say). It
	// is never logged.
	Header http.Header
	// Client sends the requests; default a fresh http.Client.
	Client *http.Client
	// Log receives a line per retried attempt; nil means slog.Default().
	Log *slog.Logger
}

// SandboxFusion runs programs on a SandboxFusion-compatible service
// (github.com/bytedance/SandboxFusion): POST {code, language, run_timeout,
// memory_limit_MB} to /run_code and read its run_result.
type SandboxFusion struct {
	opts     SandboxFusionOptions
	endpoint string
	// safeURL names the endpoint in logs and errors, without credentials.
	safeURL string
}

// maxResponseBytes bounds a response body. The service does not cut output,
// so this is well above MaxOutputBytes, but a program printing gigabytes
// must not take whale's memory with it.
const maxResponseBytes = 64 << 20

// NewSandboxFusion validates the options and fills in the defaults.
func NewSandboxFusion(opts SandboxFusionOptions) (*SandboxFusion, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sandbox fusion: URL must be http(s)://host[:port][/path], got %q", redact.URL(opts.URL))
	}
	if !strings.HasSuffix(u.Path, "/run_code") {
		u.Path = strings.TrimRight(u.Path, "/") + "/run_code"
	}
	if opts.Language == "" {
		opts.Language = "python"
	}
	if opts.RunTimeout <= 0 {
		opts.RunTimeout = DefaultRunTimeout
	}
	if opts.MemoryLimitMB == 0 {
		opts.MemoryLimitMB = DefaultMemoryLimitMB
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = opts.RunTimeout + 10*time.Second
	}
	if opts.Retries == 0 {
		opts.Retries = 3
	} else if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 500 * time.Millisecond
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &SandboxFusion{opts: opts, endpoint: u.String(), safeURL: redact.URL(u.String())}, nil
}

type sfRequest struct {
	Code          string  `json:"code"`
	Language      string  `json:"language"`
	RunTimeout    float64 `json:"run_timeout"`
	MemoryLimitMB int     `json:"memory_limit_MB"`
}

// sfResponse is SandboxFusion's RunCodeResponse. Its status is Success
// (every command finished with code 0), Failed (a command exited non-zero,
// ran out of time, or, in compatible services such as verl's clients
// expect, ended in Error) or SandboxError (the service could not run the
// program: upstream SandboxFusion reports a command that failed to start
// or be read, CommandRunStatus Error, this way, and also any exception of
// its own).
type sfResponse struct {
	Status        string     `json:"status"` // Success, Failed, SandboxError
	Message       string     `json:"message"`
	CompileResult *sfCommand `json:"compile_result"`
	RunResult     *sfCommand `json:"run_result"`
}

// sfCommand is a CommandRunResult: Finished (the process ended by itself,
// any return code), TimeLimitExceeded (killed at run_timeout) or Error.
type sfCommand struct {
	Status        string   `json:"status"` // Finished, Error, TimeLimitExceeded
	ExecutionTime *float64 `json:"execution_time"`
	ReturnCode    *int     `json:"return_code"`
	Stdout        string   `json:"stdout"`
	Stderr        string   `json:"stderr"`
}

// Run sends the program to the service. See CodeRunner.
func (s *SandboxFusion) Run(ctx context.Context, code string) (RunResult, error) {
	mem := s.opts.MemoryLimitMB
	if mem < 0 {
		mem = -1
	}
	body, err := json.Marshal(sfRequest{Code: code, Language: s.opts.Language,
		RunTimeout: s.opts.RunTimeout.Seconds(), MemoryLimitMB: mem})
	if err != nil {
		return RunResult{}, fmt.Errorf("sandbox fusion: encode request: %w", err)
	}
	var resp sfResponse
	p := retry.Policy{Attempts: s.opts.Retries + 1, Base: s.opts.Backoff, Max: max(maxBackoff, s.opts.Backoff)}
	err = retry.Do(ctx, p, func(ctx context.Context) (err error) {
		resp, err = s.call(ctx, body)
		return err
	}, retry.OnRetry(func(e retry.Event) {
		s.opts.Log.Warn("sandbox fusion: retrying", "url", s.safeURL, "attempt", e.Attempt, "wait", e.Wait, "err", e.Err)
	}))
	var re *retry.Error
	switch {
	case err == nil:
		return s.result(resp)
	case errors.As(err, &re) && re.Cause == nil:
		// "gave up after N attempts" when there were retries.
		return RunResult{}, fmt.Errorf("sandbox fusion %s: %w: %w", s.safeURL, ErrSandbox, err)
	}
	return RunResult{}, fmt.Errorf("sandbox fusion %s: %w", s.safeURL, err)
}

// maxBackoff caps the ceiling of a wait between attempts, unless Backoff
// is longer.
const maxBackoff = 10 * time.Second

// call makes one attempt; its error is marked for retry.Do.
func (s *SandboxFusion) call(ctx context.Context, body []byte) (sfResponse, error) {
	var out sfResponse
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return out, retry.Permanent(fmt.Errorf("build request: %w", redact.Error(err)))
	}
	for k, vs := range s.opts.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return out, retry.MarkTransport(redact.Error(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return out, retry.MarkTransport(fmt.Errorf("read response (HTTP %d): %w", resp.StatusCode, redact.Error(err)))
	}
	if resp.StatusCode != http.StatusOK {
		return out, retry.MarkStatus(fmt.Errorf("HTTP %d: %s", resp.StatusCode, snippet(data)), resp.StatusCode, resp.Header)
	}
	if len(data) > maxResponseBytes {
		return out, retry.Permanent(fmt.Errorf("response is larger than %d bytes", maxResponseBytes))
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, retry.Permanent(fmt.Errorf("decode response: %w: %s", err, snippet(data)))
	}
	switch out.Status {
	case "Success", "Failed":
		return out, nil
	case "SandboxError":
		// The service's own executor failed; another try may land on a
		// healthy one.
		return out, fmt.Errorf("SandboxError: %s", snippet([]byte(out.Message)))
	}
	return out, retry.Permanent(fmt.Errorf("unknown status %q in response: %s", out.Status, snippet(data)))
}

// result maps a Success or Failed response to a RunResult.
func (s *SandboxFusion) result(resp sfResponse) (RunResult, error) {
	var res RunResult
	cmd := resp.RunResult
	if c := resp.CompileResult; c != nil && (c.Status != "Finished" || c.ReturnCode != nil && *c.ReturnCode != 0) {
		// Compiled languages only: the program never ran.
		cmd = c
	}
	if cmd == nil {
		return res, fmt.Errorf("sandbox fusion %s: %q response without run_result: %s", s.safeURL, resp.Status, snippet([]byte(resp.Message)))
	}
	var outCut, errCut bool
	res.Stdout, outCut = truncate(cmd.Stdout, s.opts.MaxOutputBytes)
	res.Stderr, errCut = truncate(cmd.Stderr, s.opts.MaxOutputBytes)
	res.Truncated = outCut || errCut
	if cmd.ExecutionTime != nil {
		res.Duration = time.Duration(*cmd.ExecutionTime * float64(time.Second))
	}
	res.ExitCode = -1
	if cmd.ReturnCode != nil {
		res.ExitCode = *cmd.ReturnCode
	}
	switch cmd.Status {
	case "TimeLimitExceeded":
		res.Status = StatusTimeout
	case "Finished":
		// The full stderr, not the cut one, holds the final MemoryError.
		res.Status = classifyExit(res.ExitCode, cmd.Stderr)
		if res.Status == StatusOOM && s.opts.MemoryLimitMB < 0 && !isOOMText(cmd.Stderr) {
			// Without a memory limit a SIGKILL is not ours to explain.
			res.Status = StatusError
		}
	case "Error":
		// Outside a SandboxError response (call retries those as the
		// service's failure), an Error command is the program's: the
		// model sees what it printed, as after an exception.
		res.Status = StatusError
	default:
		return res, fmt.Errorf("sandbox fusion %s: run status %q in a %q response", s.safeURL, cmd.Status, resp.Status)
	}
	return res, nil
}

// isOOMText is isOOM without the signal rule.
func isOOMText(stderr string) bool { return isOOM(0, stderr) }

// snippet shortens a body or message for an error.
func snippet(b []byte) string {
	const max = 300
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s, _ = truncate(s, max)
		s += "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
