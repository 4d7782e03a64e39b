package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Region is the region every server answers for.
const Region = "us-east-1"

// probeXattrs is a variable so that a test can force the sidecar mode.
var probeXattrs = xattrsWork

// errNotBuilt marks a missing binary. Outside -short mode (where
// integration tests are skipped anyway) it fails the test: CI builds it.
var errNotBuilt = errors.New("versitygw not built: run `make tools`; integration tests skipped in -short mode")

// Server is one running versitygw with a posix backend in a temporary
// directory. Its keys are random, so a test can look for them in output
// that must not contain them.
type Server struct {
	Endpoint  string // http://127.0.0.1:<port>
	AccessKey string
	SecretKey string
	// Sidecar is true when the temporary directory has no extended
	// attributes and the server keeps metadata in side files instead.
	Sidecar bool

	dir  string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
	stop sync.Once
}

// Binary returns the path of the versitygw binary: $WHALE_VERSITYGW, then
// .tools/versitygw in the module root above the working directory, then
// PATH.
func Binary() (string, error) {
	if p := os.Getenv("WHALE_VERSITYGW"); p != "" && isExecutable(p) {
		return p, nil
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				if p := filepath.Join(d, ".tools", "versitygw"); isExecutable(p) {
					return p, nil
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", errNotBuilt
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// skipShort skips integration tests in -short mode: `make test-short`
// promises unit tests only.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		if _, err := Binary(); err != nil {
			t.Skip(err.Error())
		}
		t.Skip("integration test against versitygw: skipped in -short mode")
	}
}

// Start runs a server for this test alone, stops it when the test ends and
// sets the AWS_* environment for the test (so it cannot run in parallel).
func Start(t testing.TB) *Server {
	t.Helper()
	skipShort(t)
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return s
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the server shared by every test of this binary, starting
// it on first use and setting the AWS_* environment of the process to its
// credentials. Main stops it.
func Shared(t testing.TB) *Server {
	t.Helper()
	skipShort(t)
	shared.once.Do(func() {
		shared.srv, shared.err = start()
		if shared.err != nil {
			return
		}
		for _, kv := range shared.srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// Main runs the tests and then stops the shared server, if one started.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	os.Exit(code)
}

// NewBucketURL returns the gocloud URL of a fresh bucket on the shared
// server, with AWS_* credentials in the environment.
func NewBucketURL(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	return s.URL(s.NewBucket(t))
}

// URL is the gocloud URL of bucket on this server.
func (s *Server) URL(bucket string) string {
	return URLFor(s.Endpoint, bucket)
}

// URLFor is the gocloud URL of bucket behind endpoint (a server or a
// proxy in front of one).
func URLFor(endpoint, bucket string) string {
	return "s3://" + bucket + "?endpoint=" + endpoint + "&use_path_style=true&region=" + Region
}

// Env is the environment a process needs to reach this server: its
// credentials and region, with the shared AWS config files and profiles
// of the developer's machine masked out.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + Region,
		"AWS_PROFILE=",
		"AWS_DEFAULT_PROFILE=",
		"AWS_ENDPOINT_URL=",
		"AWS_ENDPOINT_URL_S3=",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + filepath.Join(s.dir, "no-aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(s.dir, "no-aws-credentials"),
	}
}

// Client is an S3 client for this server, for what s3blob cannot do
// (creating buckets) and for checking a store's work behind its back.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// NewBucket creates a bucket with a random name and returns the name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := "whale-" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.createBucket(ctx, name); err != nil {
		t.Fatalf("create bucket %s on %s: %v", name, s.Endpoint, err)
	}
	return name
}

func (s *Server) createBucket(ctx context.Context, name string) error {
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// Stop ends the server and removes its files. It is safe to call twice.
func (s *Server) Stop() {
	s.stop.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		_ = os.RemoveAll(s.dir)
	})
}

// Output is what the server printed so far, for failure messages.
func (s *Server) Output() string { return s.out.String() }

func start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var last error
	// A port picked free can be taken before the server binds it; try a
	// few times.
	for range 3 {
		s, err := startOnce(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func startOnce(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "whale-s3test-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "AKWHALE" + strings.ToUpper(randomHex(7)),
		SecretKey: "whale-secret-" + randomHex(16),
		dir:       dir,
		out:       &syncBuffer{},
		done:      make(chan struct{}),
	}
	args := []string{"--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", "127.0.0.1:" + strconv.Itoa(port), "--region", Region, "--quiet", "posix"}
	if !probeXattrs(data) {
		side := filepath.Join(dir, "meta")
		if err := os.Mkdir(side, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--sidecar", side)
		s.Sidecar = true
	}
	args = append(args, data)
	s.cmd = exec.Command(bin, args...)
	// The server's own settings come from flags only: a VGW_* or ROOT_*
	// variable of the developer's shell must not change them.
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir()}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(15 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the server answers S3 requests, not only accepts
// connections: a bucket listing succeeds.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	addr := strings.TrimPrefix(s.Endpoint, "http://")
	for {
		select {
		case <-s.done:
			return fmt.Errorf("versitygw exited before it was ready: %s", s.out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = s.Client().ListBuckets(ctx, &s3.ListBucketsInput{})
			cancel()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on %s not ready after %s: %s", s.Endpoint, limit, s.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer keeps the last 64 KiB of the server's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - 64<<10; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
