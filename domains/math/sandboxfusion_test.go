package mathdomain

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
)

// FakeSandboxFusion is a stand-in for the SandboxFusion service: it checks
// each request the way the service's pydantic model does and answers with
// the next scripted reply (the last one repeats).
type FakeSandboxFusion struct {
	t       *testing.T
	mu      sync.Mutex
	replies []fakeReply
	reqs    []sfRequest
	headers []http.Header
	srv     *httptest.Server
}

type fakeReply struct {
	status int           // HTTP status; 0 means 200
	body   any           // JSON-encoded unless a string
	delay  time.Duration // before answering
}

func NewFakeSandboxFusion(t *testing.T, replies ...fakeReply) *FakeSandboxFusion {
	f := &FakeSandboxFusion{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *FakeSandboxFusion) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/run_code" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	data, _ := io.ReadAll(r.Body)
	var raw map[string]any
	var req sfRequest
	if json.Unmarshal(data, &raw) != nil || json.Unmarshal(data, &req) != nil {
		http.Error(w, `{"detail":"invalid JSON"}`, http.StatusUnprocessableEntity)
		return
	}
	for _, field := range []string{"code", "language"} {
		if _, ok := raw[field]; !ok {
			http.Error(w, `{"detail":"field required: `+field+`"}`, http.StatusUnprocessableEntity)
			return
		}
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, req)
	f.headers = append(f.headers, r.Header.Clone())
	reply := f.replies[min(n, len(f.replies)-1)]
	f.mu.Unlock()

	if reply.delay > 0 {
		select {
		case <-time.After(reply.delay):
		case <-r.Context().Done():
			return
		}
	}
	status := reply.status
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if s, ok := reply.body.(string); ok {
		io.WriteString(w, s)
		return
	}
	json.NewEncoder(w).Encode(reply.body)
}

func (f *FakeSandboxFusion) requests() []sfRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sfRequest(nil), f.reqs...)
}

// sfReply builds a service response as SandboxFusion writes it.
func sfReply(status, runStatus string, code *int, stdout, stderr string) map[string]any {
	return map[string]any{
		"status": status, "message": "", "compile_result": nil, "executor_pod_name": nil, "files": map[string]any{},
		"run_result": map[string]any{"status": runStatus, "execution_time": 0.25, "return_code": code, "stdout": stdout, "stderr": stderr},
	}
}

func intp(i int) *int { return &i }

var quiet = slog.New(slog.DiscardHandler)

func newSF(t *testing.T, url string, mod func(*SandboxFusionOptions)) *SandboxFusion {
	t.Helper()
	opts := SandboxFusionOptions{URL: url, Backoff: time.Millisecond, Log: quiet}
	if mod != nil {
		mod(&opts)
	}
	s, err := NewSandboxFusion(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSandboxFusionResults(t *testing.T) {
	traceback := "Traceback (most recent call last):\n  File \"/tmp/x.py\", line 1, in <module>\nValueError: boom\n"
	cases := []struct {
		name   string
		reply  fakeReply
		want   RunResult
		errSub string
	}{
		{"ok", fakeReply{body: sfReply("Success", "Finished", intp(0), "4\n", "")},
			RunResult{Stdout: "4\n", Status: StatusOK, Duration: 250 * time.Millisecond}, ""},
		{"exception", fakeReply{body: sfReply("Failed", "Finished", intp(1), "", traceback)},
			RunResult{Stderr: traceback, ExitCode: 1, Status: StatusError, Duration: 250 * time.Millisecond}, ""},
		{"timeout", fakeReply{body: sfReply("Failed", "TimeLimitExceeded", nil, "partial", "")},
			RunResult{Stdout: "partial", ExitCode: -1, Status: StatusTimeout, Duration: 250 * time.Millisecond}, ""},
		{"memory error", fakeReply{body: sfReply("Failed", "Finished", intp(1), "", "Traceback ...\nMemoryError\n")},
			RunResult{Stderr: "Traceback ...\nMemoryError\n", ExitCode: 1, Status: StatusOOM, Duration: 250 * time.Millisecond}, ""},
		{"killed", fakeReply{body: sfReply("Failed", "Finished", intp(-9), "", "")},
			RunResult{ExitCode: -9, Status: StatusOOM, Duration: 250 * time.Millisecond}, ""},
		{"compile error", fakeReply{body: map[string]any{"status": "Failed", "message": "",
			"compile_result": map[string]any{"status": "Finished", "return_code": 1, "stderr": "syntax"}, "run_result": nil}},
			RunResult{Stderr: "syntax", ExitCode: 1, Status: StatusError}, ""},
		// A command that ended in Error outside a SandboxError response is
		// the program's outcome: verl's client reads Failed + Error as a
		// runtime error, so the model sees what it printed.
		{"run Error in Failed", fakeReply{body: sfReply("Failed", "Error", nil, "so far\n", traceback)},
			RunResult{Stdout: "so far\n", Stderr: traceback, ExitCode: -1, Status: StatusError, Duration: 250 * time.Millisecond}, ""},
		{"run Error with its return code", fakeReply{body: sfReply("Failed", "Error", intp(1), "", traceback)},
			RunResult{Stderr: traceback, ExitCode: 1, Status: StatusError, Duration: 250 * time.Millisecond}, ""},
		{"run Error in Success", fakeReply{body: sfReply("Success", "Error", nil, "", "odd")},
			RunResult{Stderr: "odd", ExitCode: -1, Status: StatusError, Duration: 250 * time.Millisecond}, ""},
		{"compile Error", fakeReply{body: map[string]any{"status": "Failed", "message": "",
			"compile_result": map[string]any{"status": "Error", "return_code": 1, "stderr": "Object name not found."}, "run_result": nil}},
			RunResult{Stderr: "Object name not found.", ExitCode: 1, Status: StatusError}, ""},
		{"unknown run status", fakeReply{body: sfReply("Failed", "Crashed", intp(1), "", "")}, RunResult{}, `run status "Crashed"`},
		{"null fields", fakeReply{body: `{"status":"Success","message":"","run_result":{"status":"Finished","execution_time":null,"return_code":0,"stdout":null,"stderr":null}}`},
			RunResult{Status: StatusOK}, ""},
		{"no run result", fakeReply{body: `{"status":"Failed","message":"odd"}`}, RunResult{}, "without run_result"},
		{"unknown status", fakeReply{body: `{"status":"Weird","message":""}`}, RunResult{}, `unknown status "Weird"`},
		{"not json", fakeReply{body: `<html>oops</html>`}, RunResult{}, "decode response"},
		{"bad request", fakeReply{status: 400, body: `{"detail":"bad"}`}, RunResult{}, "HTTP 400"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := NewFakeSandboxFusion(t, c.reply)
			got, err := newSF(t, fake.srv.URL, nil).Run(context.Background(), "print(2+2)")
			if c.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("err = %v, want it to mention %q", err, c.errSub)
				}
				if n := len(fake.requests()); n != 1 {
					t.Errorf("%d requests, want 1 (a permanent failure is not retried)", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestSandboxFusionRequest(t *testing.T) {
	fake := NewFakeSandboxFusion(t, fakeReply{body: sfReply("Success", "Finished", intp(0), "", "")})
	sf := newSF(t, fake.srv.URL+"/", func(o *SandboxFusionOptions) {
		o.RunTimeout = 3 * time.Second
		o.MemoryLimitMB = 512
		o.Header = http.Header{"Authorization": {"Bearer t0ken"}}
	})
	if _, err := sf.Run(context.Background(), "print('hi')"); err != nil {
		t.Fatal(err)
	}
	reqs := fake.requests()
	want := sfRequest{Code: "print('hi')", Language: "python", RunTimeout: 3, MemoryLimitMB: 512}
	if len(reqs) != 1 || reqs[0] != want {
		t.Fatalf("requests %+v, want [%+v]", reqs, want)
	}
	if got := fake.headers[0].Get("Authorization"); got != "Bearer t0ken" {
		t.Errorf("Authorization %q", got)
	}

	// The full endpoint works too, and no limit is sent as -1.
	fake2 := NewFakeSandboxFusion(t, fakeReply{body: sfReply("Success", "Finished", intp(0), "", "")})
	sf2 := newSF(t, fake2.srv.URL+"/run_code", func(o *SandboxFusionOptions) { o.MemoryLimitMB = -5 })
	if _, err := sf2.Run(context.Background(), "pass"); err != nil {
		t.Fatal(err)
	}
	if got := fake2.requests()[0].MemoryLimitMB; got != -1 {
		t.Errorf("memory_limit_MB %d, want -1", got)
	}
}

func TestSandboxFusionRetries(t *testing.T) {
	ok := fakeReply{body: sfReply("Success", "Finished", intp(0), "done\n", "")}
	sandboxErr := fakeReply{body: map[string]any{"status": "SandboxError", "message": "executor lost", "run_result": nil}}
	// Upstream SandboxFusion answers a command it could not start or read
	// (CommandRunStatus Error) with SandboxError and the command's stderr
	// as the message: the service's failure, not the program's.
	commandErr := sfReply("SandboxError", "Error", nil, "", "exception on running command: [Errno 24] Too many open files")
	commandErr["message"] = "exception on running command: [Errno 24] Too many open files"
	sandboxCmdErr := fakeReply{body: commandErr}
	cases := []struct {
		name     string
		replies  []fakeReply
		retries  int
		wantReqs int
		wantErr  bool
	}{
		{"5xx then ok", []fakeReply{{status: 503, body: "busy"}, {status: 502, body: "gateway"}, ok}, 3, 3, false},
		{"429 then ok", []fakeReply{{status: 429, body: "slow down"}, ok}, 3, 2, false},
		{"sandbox error then ok", []fakeReply{sandboxErr, ok}, 3, 2, false},
		{"5xx forever", []fakeReply{{status: 500, body: "down"}}, 2, 3, true},
		{"sandbox error forever", []fakeReply{sandboxErr}, 1, 2, true},
		{"command Error in SandboxError then ok", []fakeReply{sandboxCmdErr, ok}, 3, 2, false},
		{"command Error in SandboxError forever", []fakeReply{sandboxCmdErr}, 2, 3, true},
		{"no retries", []fakeReply{{status: 500, body: "down"}, ok}, -1, 1, true},
		{"slow attempt cut by call timeout", []fakeReply{{delay: 5 * time.Second, body: sfReply("Success", "Finished", intp(0), "late", "")}, ok}, 3, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := NewFakeSandboxFusion(t, c.replies...)
			sf := newSF(t, fake.srv.URL, func(o *SandboxFusionOptions) {
				o.Retries = c.retries
				o.CallTimeout = 300 * time.Millisecond
			})
			res, err := sf.Run(context.Background(), "print('done')")
			if n := len(fake.requests()); n != c.wantReqs {
				t.Errorf("%d requests, want %d", n, c.wantReqs)
			}
			if c.wantErr {
				if err == nil || !errors.Is(err, ErrSandbox) {
					t.Fatalf("err = %v, want ErrSandbox", err)
				}
				return
			}
			if err != nil || res.Stdout != "done\n" {
				t.Fatalf("res %+v, err %v", res, err)
			}
		})
	}
}

func TestSandboxFusionConnectionRefusedHidesCredentials(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	var logs strings.Builder
	sf := newSF(t, "http://alice:hunter2@"+addr+"/api?token=s3cret", func(o *SandboxFusionOptions) {
		o.Retries = 2
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	_, err := sf.Run(context.Background(), "print(1)")
	if !errors.Is(err, ErrSandbox) {
		t.Fatalf("err = %v, want ErrSandbox", err)
	}
	for _, secret := range []string{"hunter2", "s3cret", "alice"} {
		if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%q leaked:\nerr: %v\nlogs: %s", secret, err, logs.String())
		}
	}
	if !strings.Contains(err.Error(), addr+"/api/run_code") {
		t.Errorf("error does not name the endpoint: %v", err)
	}
	if got := strings.Count(logs.String(), "retrying"); got != 2 {
		t.Errorf("%d retry log lines, want 2", got)
	}
}

func TestSandboxFusionCancel(t *testing.T) {
	fake := NewFakeSandboxFusion(t, fakeReply{status: 503, body: "busy"})
	sf := newSF(t, fake.srv.URL, func(o *SandboxFusionOptions) { o.Backoff = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sf.Run(ctx, "print(1)")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("cancel took %v", time.Since(start))
	}
}

func TestSandboxFusionTruncates(t *testing.T) {
	long := strings.Repeat("é", 5000) // 2 bytes each
	fake := NewFakeSandboxFusion(t, fakeReply{body: sfReply("Success", "Finished", intp(0), long, "short")})
	res, err := newSF(t, fake.srv.URL, func(o *SandboxFusionOptions) { o.MaxOutputBytes = 101 }).Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 100 || !strings.HasPrefix(long, res.Stdout) || !res.Truncated || res.Stderr != "short" {
		t.Errorf("stdout %d bytes, truncated %v, stderr %q", len(res.Stdout), res.Truncated, res.Stderr)
	}
}

func TestNewSandboxFusionRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://host/run_code", "http://"} {
		if _, err := NewSandboxFusion(SandboxFusionOptions{URL: u}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}

// TestSandboxFusionErrorReachesModel runs the code tool of a math episode
// against a FAKE SandboxFusion: a program that ended in Error is a tool
// result the harness formats for the model (stdout, stderr, the failure),
// while a sandbox that keeps failing is a tool error, and neither ends the
// episode.
func TestSandboxFusionErrorReachesModel(t *testing.T) {
	traceback := "Traceback (most recent call last):\nZeroDivisionError: division by zero\n"
	cases := []struct {
		name      string
		reply     fakeReply
		toolError string
		text      []string
	}{
		{"program Error", fakeReply{body: sfReply("Failed", "Error", intp(1), "before\n", traceback)}, "",
			[]string{"before\n", "ZeroDivisionError", "exit code 1"}},
		{"program raised", fakeReply{body: sfReply("Failed", "Finished", intp(1), "", traceback)}, "",
			[]string{"ZeroDivisionError", "exit code 1"}},
		{"sandbox down", fakeReply{body: map[string]any{"status": "SandboxError", "message": "executor lost"}}, "code sandbox failed", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := NewFakeSandboxFusion(t, c.reply)
			sf := newSF(t, fake.srv.URL, func(o *SandboxFusionOptions) { o.Retries = 1 })
			env := newEnv(t, divisors, sf, loadHarness(t, ""))
			st, err := env.Step(context.Background(), harness.Action{Kind: "tool", Tool: "python", Input: "print('before'); 1/0"})
			if err != nil {
				t.Fatalf("Step error %v: only a cancelled context ends the episode", err)
			}
			if st.Done {
				t.Fatalf("Step = %+v, want the episode to go on", st)
			}
			if c.toolError != "" {
				if !strings.Contains(st.ToolError, c.toolError) || st.ToolResult != nil {
					t.Fatalf("Step = %+v, want a tool error mentioning %q", st, c.toolError)
				}
				return
			}
			if st.ToolError != "" {
				t.Fatalf("tool error %q, want the program's outcome as a result", st.ToolError)
			}
			r := st.ToolResult.(map[string]any)
			if r["status"] != StatusError || r["stderr"] != traceback {
				t.Errorf("result = %v, want status %q and the traceback", r, StatusError)
			}
			for _, w := range c.text {
				if !strings.Contains(r["text"].(string), w) {
					t.Errorf("text %q does not contain %q", r["text"], w)
				}
			}
		})
	}
}
