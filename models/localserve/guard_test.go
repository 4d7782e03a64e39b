package localserve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// do sends one request with the given Content-Type and headers and
// returns the status, the body and the response headers.
func do(t testing.TB, method, url, contentType, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

func loadBody(name, path string) string {
	b, _ := json.Marshal(loraRequest{Name: name, Path: path})
	return string(b)
}

// Without an adapter directory the load and unload endpoints do not
// exist, as in a vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING: 404
// whatever the request, and nothing is opened.
func TestAdapterEndpointsOffByDefault(t *testing.T) {
	dir := t.TempDir()
	if err := newModel(t, 2).Save(filepath.Join(dir, CheckpointFile), false); err != nil {
		t.Fatal(err)
	}
	f := start(t, newModel(t, 1), Options{})
	root := strings.TrimSuffix(f.url, "/v1")
	for _, tc := range []struct{ method, path, body string }{
		{"POST", PathLoad, loadBody("x", dir)},
		{"POST", PathLoad, loadBody("x", "/dev/zero")},
		{"POST", PathUnload, `{"lora_name":"base"}`},
		{"GET", PathLoad, ""},
	} {
		status, body, _ := do(t, tc.method, root+tc.path, "application/json", tc.body)
		if status != http.StatusNotFound || !strings.Contains(body, "--adapter-dir") {
			t.Errorf("%s %s %s: HTTP %d %s, want 404", tc.method, tc.path, tc.body, status, body)
		}
	}
	if _, ok := listModels(t, f.url)["x"]; ok {
		t.Error("a checkpoint was loaded with loading off")
	}
}

// A web page can post text/plain or a form to any address without a CORS
// preflight; only application/json bodies are accepted (vLLM's message),
// so such a post is refused before it is read.
func TestJSONOnly(t *testing.T) {
	dir := t.TempDir()
	if err := newModel(t, 2).Save(filepath.Join(dir, CheckpointFile), false); err != nil {
		t.Fatal(err)
	}
	f := start(t, newModel(t, 1), Options{AdapterDir: dir})
	root := strings.TrimSuffix(f.url, "/v1")
	load := loadBody("csrf", CheckpointFile)
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "json"} {
		for path, body := range map[string]string{PathLoad: load, PathChat: chat, PathUnload: `{"lora_name":"csrf"}`} {
			status, text, _ := do(t, "POST", root+path, ct, body)
			if status != http.StatusUnsupportedMediaType || !strings.Contains(text, "Only 'application/json' is allowed") {
				t.Errorf("%s with Content-Type %q: HTTP %d %s, want 415", path, ct, status, text)
			}
		}
	}
	if _, ok := listModels(t, f.url)["csrf"]; ok {
		t.Fatal("a text/plain post loaded a checkpoint")
	}
	if status, text, _ := do(t, "POST", root+PathLoad, "Application/JSON; charset=utf-8", load); status != 200 {
		t.Errorf("application/json with a charset: HTTP %d %s", status, text)
	}
}

// fixtureDir is an adapter directory next to an outside one, each with a
// checkpoint of its own weights, and the symbolic links an attacker
// would try.
type fixtureDir struct {
	dir, outside  string
	inner, outer  *local.Model
	secret        string // a file outside whose content is secretMarker
	secretInDir   string // a file inside whose content is secretMarker
	magicInDir    string // WHALELM1 + secretMarker, inside
	shadowLikeDir string // starts like /etc/shadow, inside
}

const secretMarker = "SECRET-MARKER-7d1c0f3e-do-not-echo"

func newFixtureDir(t testing.TB) fixtureDir {
	t.Helper()
	base := t.TempDir()
	fx := fixtureDir{dir: filepath.Join(base, "adapters"), outside: filepath.Join(base, "outside"), inner: newModel(t, 2), outer: newModel(t, 3)}
	for _, d := range []string{filepath.Join(fx.dir, "good"), filepath.Join(fx.dir, "nested", "deep"), fx.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fx.inner.Save(filepath.Join(fx.dir, "good", CheckpointFile), false))
	must(fx.inner.Save(filepath.Join(fx.dir, "nested", "deep", "weights.bin"), false))
	must(fx.outer.Save(filepath.Join(fx.outside, CheckpointFile), false))
	fx.secret = filepath.Join(fx.outside, "secret.txt")
	must(os.WriteFile(fx.secret, []byte(secretMarker+"\n"), 0o600))
	fx.secretInDir = filepath.Join(fx.dir, "secret.txt")
	must(os.WriteFile(fx.secretInDir, []byte(secretMarker+"\n"), 0o600))
	fx.magicInDir = filepath.Join(fx.dir, "magic.bin")
	must(os.WriteFile(fx.magicInDir, []byte("WHALELM1"+secretMarker+strings.Repeat(secretMarker, 4)), 0o600))
	fx.shadowLikeDir = filepath.Join(fx.dir, "shadow")
	must(os.WriteFile(fx.shadowLikeDir, []byte("root:$6$"+secretMarker+":19000:0:99999:7:::\n"), 0o600))
	must(os.Symlink(filepath.Join(fx.outside, CheckpointFile), filepath.Join(fx.dir, "link-out.whalelm")))
	must(os.Symlink(fx.outside, filepath.Join(fx.dir, "link-out-dir")))
	must(os.Symlink("../outside/"+CheckpointFile, filepath.Join(fx.dir, "link-rel-out.whalelm")))
	must(os.Symlink(fx.secret, filepath.Join(fx.dir, "link-secret")))
	must(os.Symlink("/dev/zero", filepath.Join(fx.dir, "zero")))
	must(os.Symlink("good/"+CheckpointFile, filepath.Join(fx.dir, "link-in.whalelm")))
	must(os.Symlink(filepath.Join(fx.dir, "good", CheckpointFile), filepath.Join(fx.dir, "link-abs-in.whalelm")))
	return fx
}

// The load endpoint reads only under the adapter directory: no absolute
// path elsewhere, no "..", no symbolic link that leads out or is
// absolute; a relative link that stays inside is followed.
func TestLoadConfinedToAdapterDir(t *testing.T) {
	fx := newFixtureDir(t)
	f := start(t, newModel(t, 1), Options{AdapterDir: fx.dir, Log: quietLog()})
	root := strings.TrimSuffix(f.url, "/v1")
	for _, tc := range []struct {
		path string
		want string // in the 400's message
	}{
		{filepath.Join(fx.outside, CheckpointFile), "not under the server's adapter directory"},
		{fx.outside, "not under the server's adapter directory"},
		{fx.dir + "/../outside/" + CheckpointFile, "not under the server's adapter directory"},
		{fx.dir + "/good/../../outside", "not under the server's adapter directory"},
		{"../outside/" + CheckpointFile, "leaves the adapter directory"},
		{"good/../../outside/" + CheckpointFile, "leaves the adapter directory"},
		{filepath.Join(fx.dir, "link-out.whalelm"), "symbolic link"},
		{"link-rel-out.whalelm", "symbolic link"},
		{"link-out-dir", "symbolic link"},
		{"link-out-dir/" + CheckpointFile, "symbolic link"},
		{"link-abs-in.whalelm", "symbolic link"}, // absolute links are refused, even into the directory
		{"/etc/shadow", "not under"},
		{"/etc/passwd", "not under"},
	} {
		status, body, _ := do(t, "POST", root+PathLoad, "application/json", loadBody("escape", tc.path))
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("lora_path %s: HTTP %d %s, want 400 with %q", tc.path, status, body, tc.want)
		}
	}
	if _, ok := listModels(t, f.url)["escape"]; ok {
		t.Fatal("a checkpoint outside the adapter directory was loaded")
	}
	// Inside: a file, a directory holding model.whalelm (what the
	// finetune stage sends), a relative path, a link that stays inside.
	for i, p := range []string{filepath.Join(fx.dir, "good", CheckpointFile), filepath.Join(fx.dir, "good"), "good", "link-in.whalelm", fx.dir + "/nested/../good"} {
		name := fmt.Sprintf("in%d", i)
		if status, body, _ := do(t, "POST", root+PathLoad, "application/json", loadBody(name, p)); status != 200 {
			t.Errorf("lora_path %s: HTTP %d %s", p, status, body)
		}
		if got := listModels(t, f.url)[name].Digest; got != fx.inner.Digest() {
			t.Errorf("lora_path %s: digest %s, want the inner checkpoint's", p, got)
		}
	}
}

// Files that used to kill or hang the server are refused quickly, before
// they are read: /dev/zero (an endless read, out of memory), a FIFO
// (an open that blocks), a directory (walked whole), a file larger than
// the limit (read whole into memory).
func TestLoadRefusesSpecialFilesQuickly(t *testing.T) {
	fx := newFixtureDir(t)
	if err := syscall.Mkfifo(filepath.Join(fx.dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(fx.dir, "fifodir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fx.dir, "fifodir", CheckpointFile), 0o600); err != nil {
		t.Fatal(err)
	}
	huge, err := os.Create(filepath.Join(fx.dir, "huge.whalelm"))
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 64 GiB on paper, nothing on disk.
	if err := huge.Truncate(64 << 30); err != nil {
		t.Fatal(err)
	}
	huge.Close()
	over := filepath.Join(fx.dir, "over.whalelm")
	if err := os.WriteFile(over, bytes.Repeat([]byte{'W'}, 1<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	// The directory of many files that used to be walked.
	many := filepath.Join(fx.dir, "many")
	for i := range 200 {
		d := filepath.Join(many, fmt.Sprint(i%10))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprint(i)), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := start(t, newModel(t, 1), Options{AdapterDir: fx.dir, MaxAdapterBytes: 1 << 20, Log: quietLog()})
	// A server whose adapter directory is / shows that what is opened is
	// checked, whatever the path checks let through.
	slash := start(t, newModel(t, 1), Options{AdapterDir: "/", MaxAdapterBytes: 1 << 20, Log: quietLog()})
	cases := []struct {
		url, path, want string
	}{
		{f.url, "/dev/zero", "not under"},
		{f.url, "zero", "symbolic link"},
		{f.url, "fifo", "not a regular file"},
		{f.url, "fifodir", "not a regular file"},
		{f.url, "huge.whalelm", "more than the limit"},
		{f.url, over, "more than the limit"},
		{f.url, "many", "a directory without " + CheckpointFile},
		{f.url, "nested", "a directory without " + CheckpointFile}, // holds a checkpoint deeper down: no search
		{slash.url, "/dev/zero", "not a regular file"},
		{slash.url, "/dev/urandom", "not a regular file"},
		{slash.url, filepath.Join(fx.dir, "fifo"), "not a regular file"},
		{slash.url, filepath.Join(fx.dir, "huge.whalelm"), "more than the limit"},
	}
	if runtime.GOOS == "linux" {
		// Reports size 0 and streams the environment: read up to 0 bytes.
		cases = append(cases, struct{ url, path, want string }{slash.url, "/proc/self/environ", "not a whale checkpoint"})
	}
	for _, tc := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		status, body, _ := do(t, "POST", strings.TrimSuffix(tc.url, "/v1")+PathLoad, "application/json", loadBody("special", tc.path))
		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("lora_path %s: HTTP %d %s, want 400 with %q", tc.path, status, body, tc.want)
		}
		if elapsed > 2*time.Second {
			t.Errorf("lora_path %s: refused after %v", tc.path, elapsed)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
			t.Errorf("lora_path %s: %d bytes allocated while refusing it", tc.path, grew)
		}
	}
}

// Error bodies name the path and the reason, never the file's bytes: the
// start of /etc/shadow once came back in a message.
func TestLoadErrorsNeverEchoTheFile(t *testing.T) {
	fx := newFixtureDir(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	f := start(t, newModel(t, 1), Options{AdapterDir: fx.dir, Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	root := strings.TrimSuffix(f.url, "/v1")
	for _, p := range []string{fx.secret, fx.secretInDir, "secret.txt", fx.magicInDir, fx.shadowLikeDir, "link-secret"} {
		status, body, _ := do(t, "POST", root+PathLoad, "application/json", loadBody("leak", p))
		if status != http.StatusBadRequest {
			t.Errorf("lora_path %s: HTTP %d %s, want 400", p, status, body)
		}
		if strings.Contains(body, "MARKER") || strings.Contains(body, "root:") {
			t.Errorf("lora_path %s: the error repeats the file: %s", p, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "MARKER") {
		t.Errorf("the server log repeats a file: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// With a token every request but /health needs it as a bearer token; the
// whale client sends model.api_key_env's value as one.
func TestBearerToken(t *testing.T) {
	const token = "tok-4c2f9a"
	f := start(t, newModel(t, 1), Options{Token: token, AdapterDir: t.TempDir()})
	root := strings.TrimSuffix(f.url, "/v1")
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer tok-4c2f9", "Bearer tok-4c2f9a0", "Basic " + token, token} {
		for _, tc := range []struct{ method, path, body string }{
			{"POST", PathChat, chat}, {"GET", PathModels, ""}, {"POST", PathLoad, loadBody("x", "y")}, {"POST", PathUnload, `{"lora_name":"x"}`},
		} {
			var hdr []string
			if auth != "" {
				hdr = []string{"Authorization", auth}
			}
			status, body, h := do(t, tc.method, root+tc.path, "application/json", tc.body, hdr...)
			if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || !strings.Contains(body, "Unauthorized") {
				t.Errorf("%s %s with Authorization %q: HTTP %d %s, want 401", tc.method, tc.path, auth, status, body)
			}
		}
	}
	if status, body, _ := do(t, "POST", root+PathChat, "application/json", chat, "Authorization", "bearer "+token); status != 200 {
		t.Errorf("with the token: HTTP %d %s", status, body)
	}
	if status, _, _ := do(t, "GET", root+PathHealth, "", ""); status != 200 {
		t.Errorf("/health without the token: HTTP %d", status)
	}
	t.Setenv("WHALE_TEST_SERVE_TOKEN", token)
	c, err := models.New(models.Config{Endpoints: []string{f.url}, Model: "base", APIKeyEnv: "WHALE_TEST_SERVE_TOKEN", Retry: models.RetryPolicy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}, Sampling: greedy(2)}); err != nil {
		t.Errorf("the whale client with the key: %v", err)
	}
	if _, err := f.client.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}, Sampling: greedy(2)}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("the whale client without the key: %v, want a 401", err)
	}
}

// A client that sends its headers and then trickles the body is cut off
// by the read timeout instead of holding a connection and a slot forever.
func TestSlowBodyCutOff(t *testing.T) {
	s, err := New(newModel(t, 1), Options{Name: "base", ReadTimeout: 300 * time.Millisecond, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Listen("127.0.0.1:0", s)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	addr := strings.TrimSuffix(strings.TrimPrefix(h.URL, "http://"), "/v1")
	for _, headersOnly := range []bool{false, true} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n", PathChat)
		if !headersOnly {
			fmt.Fprint(conn, "\r\n")
		}
		stop := make(chan struct{})
		go func() { // one byte every 50 ms: 100 kB would take 80 minutes
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, _ := io.ReadAll(conn) // until the server answers and closes, or just closes
		elapsed := time.Since(start)
		close(stop)
		conn.Close()
		if elapsed > 3*time.Second {
			t.Errorf("headers only %v: the connection stayed open %v with a 300ms read timeout", headersOnly, elapsed)
		}
		if !headersOnly && !bytes.Contains(reply, []byte("408")) {
			t.Errorf("slow body: reply %q, want a 408", reply)
		}
	}
}

// A body over the cap is 413, at once when Content-Length says so, after
// maxBody bytes when it is chunked.
func TestBodyCap(t *testing.T) {
	f := start(t, newModel(t, 1), Options{AdapterDir: t.TempDir()})
	root := strings.TrimSuffix(f.url, "/v1")
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", maxBody) + `"}]}`
	for _, path := range []string{PathChat, PathLoad} {
		if status, body, _ := do(t, "POST", root+path, "application/json", big); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than") {
			t.Errorf("%s, %d bytes: HTTP %d %.200s", path, len(big), status, body)
		}
		// Chunked: no Content-Length to refuse early.
		req, _ := http.NewRequest("POST", root+path, io.MultiReader(strings.NewReader(big)))
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s chunked: HTTP %d", path, resp.StatusCode)
		}
	}
}

// Requests beyond MaxInFlight are refused at once with 429 and
// Retry-After instead of piling up; /health still answers.
func TestConcurrencyBound(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	f := start(t, newModel(t, 1), Options{MaxInFlight: 1, Resolve: func(ctx context.Context, name string) (*local.Model, string, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, "", nil
	}})
	root := strings.TrimSuffix(f.url, "/v1")
	done := make(chan int, 1)
	go func() {
		// Held in Resolve, inside the handler: it holds the one slot.
		req, _ := http.NewRequest("POST", root+PathChat, strings.NewReader(`{"model":"blocks","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	for range 3 {
		status, body, h := do(t, "POST", root+PathChat, "application/json", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
		if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, "RateLimitError") {
			t.Errorf("beyond the bound: HTTP %d %v %s, want 429 with Retry-After", status, h, body)
		}
	}
	if status, _, _ := do(t, "GET", root+PathHealth, "", ""); status != 200 {
		t.Errorf("/health at the bound: HTTP %d", status)
	}
	close(release)
	if status := <-done; status != http.StatusNotFound {
		t.Errorf("held request: HTTP %d, want 404 (no such model)", status)
	}
	if r := ask(t, f.client, "hi", greedy(1)); r.Model != "base" {
		t.Errorf("after the bound cleared: %+v", r)
	}
}

// A request that cannot be answered within RequestTimeout gets a 503
// with Retry-After instead of hanging on.
func TestRequestTimeout(t *testing.T) {
	// A batch window far longer than the timeout keeps the request waiting.
	f := start(t, newModel(t, 1), Options{Window: 5 * time.Second, RequestTimeout: 200 * time.Millisecond})
	start := time.Now()
	status, body, h := do(t, "POST", strings.TrimSuffix(f.url, "/v1")+PathChat, "application/json", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(body, "request timeout") {
		t.Errorf("HTTP %d %v %s, want 503 with Retry-After", status, h, body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v with a 200ms timeout", d)
	}
}
