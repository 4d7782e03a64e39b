package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/storage"
)

// Config shapes the heavier cases to a backend's speed. The zero value is
// the full suite.
type Config struct {
	// ListKeys is how many keys the pagination case writes; 0 means 1100,
	// more than one 1000-key page. A store opened with a small
	// Options.ListPageSize crosses pages with far fewer keys.
	ListKeys int
	// Racers goroutines each try to create every one of RaceKeys keys
	// exclusively; 0 means 16 and 100.
	Racers, RaceKeys int
	// BigSize is the size of the one large round trip; 0 means 17 MiB,
	// past s3blob's 16 MiB multipart threshold.
	BigSize int
}

func (c Config) withDefaults() Config {
	if c.ListKeys <= 0 {
		c.ListKeys = 1100
	}
	if c.Racers <= 0 {
		c.Racers = 16
	}
	if c.RaceKeys <= 0 {
		c.RaceKeys = 100
	}
	if c.BigSize <= 0 {
		c.BigSize = 17 << 20
	}
	return c
}

// Run runs the suite with the full Config.
func Run(t *testing.T, open func(t *testing.T) *storage.Store) {
	RunConfig(t, Config{}, open)
}

// RunConfig runs the suite. open must return an empty Store at a fresh
// prefix of one shared root (see OpenUnder): two calls in one test must
// reach the same bucket, so that isolation between prefixes is checked.
func RunConfig(t *testing.T, cfg Config, open func(t *testing.T) *storage.Store) {
	cfg = cfg.withDefaults()
	cases := []struct {
		name string
		fn   func(*testing.T, Config, func(*testing.T) *storage.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"BigRoundTrip", testBigRoundTrip},
		{"WriterVisibleOnlyAfterClose", testWriterVisibleOnlyAfterClose},
		{"AbortLeavesNothing", testAbortLeavesNothing},
		{"NotFound", testNotFound},
		{"RangeReader", testRangeReader},
		{"List", testList},
		{"ListPagination", testListPagination},
		{"CreateExclusive", testCreateExclusive},
		{"CreateExclusiveRace", testCreateExclusiveRace},
		{"ReaderAt", testReaderAt},
		{"Delete", testDelete},
		{"InvalidKeys", testInvalidKeys},
		{"PrefixIsolation", testPrefixIsolation},
		{"Stats", testStats},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, cfg, open) })
	}
}

// OpenUnder opens rootURL under a fresh random prefix (nested in any prefix
// the URL already has) and closes the Store when the test ends.
func OpenUnder(t testing.TB, rootURL string, opts *storage.Options) *storage.Store {
	t.Helper()
	u, err := url.Parse(rootURL)
	if err != nil {
		t.Fatalf("root URL %s: %v", redact.URL(rootURL), err)
	}
	q := u.Query()
	p := strings.Trim(q.Get("prefix"), "/")
	if p != "" {
		p += "/"
	}
	q.Set("prefix", p+"t-"+RandomHex(6))
	u.RawQuery = q.Encode()
	s, err := storage.Open(context.Background(), u.String(), opts)
	if err != nil {
		t.Fatalf("open %s: %v", redact.URL(u.String()), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RandomHex returns 2n random hex digits.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(n int, seed uint64) []byte {
	r := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// listAll lists prefix and returns the entries, failing the test on error.
func listAll(t *testing.T, s *storage.Store, prefix string, dirs bool) []storage.Entry {
	t.Helper()
	var out []storage.Entry
	if err := s.List(ctxT(t), prefix, dirs, func(e storage.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("list %q (dirs %v): %v", prefix, dirs, err)
	}
	return out
}

func keysOf(es []storage.Entry) []string {
	var ks []string
	for _, e := range es {
		ks = append(ks, e.Key)
	}
	return ks
}

// noSecrets fails the test when msg holds a credential of the environment.
func noSecrets(t *testing.T, msg string) {
	t.Helper()
	for _, env := range []string{"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"} {
		if v := os.Getenv(env); len(v) >= 4 && strings.Contains(msg, v) {
			t.Errorf("error message contains $%s: %s", env, msg)
		}
	}
}
