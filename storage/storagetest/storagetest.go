package storagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
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

func testRoundTrip(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	sizes := []int{0, 1, 1000, 256 << 10}
	ways := []struct {
		name  string
		write func(key string, data []byte) error
	}{
		{"WriteAll", func(key string, data []byte) error { return s.WriteAll(ctx, key, data) }},
		{"Put", func(key string, data []byte) error { return s.Put(ctx, key, bytes.NewReader(data)) }},
		{"NewWriter", func(key string, data []byte) error {
			w, err := s.NewWriter(ctx, key)
			if err != nil {
				return err
			}
			// Uneven chunks, as an encoder writes.
			for len(data) > 0 {
				n := min(len(data), 7777)
				if _, err := w.Write(data[:n]); err != nil {
					w.Abort()
					return err
				}
				data = data[n:]
			}
			return w.Close()
		}},
		{"CreateExclusive", func(key string, data []byte) error { return s.CreateExclusive(ctx, key, data) }},
	}
	start := time.Now()
	for _, way := range ways {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/%d", way.name, n), func(t *testing.T) {
				key := fmt.Sprintf("rt/%s/obj-%d.bin", way.name, n)
				data := randomBytes(n, uint64(n)+uint64(len(way.name)))
				if err := way.write(key, data); err != nil {
					t.Fatalf("write %s: %v", key, err)
				}
				got, err := s.ReadAll(ctx, key)
				if err != nil {
					t.Fatalf("ReadAll %s: %v", key, err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("ReadAll %s: %d bytes differ from the %d written", key, len(got), len(data))
				}
				r, err := s.NewReader(ctx, key)
				if err != nil {
					t.Fatalf("NewReader %s: %v", key, err)
				}
				got, err = io.ReadAll(r)
				r.Close()
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("NewReader %s: err %v, %d bytes, equal %v", key, err, len(got), bytes.Equal(got, data))
				}
				a, err := s.Stat(ctx, key)
				if err != nil {
					t.Fatalf("Stat %s: %v", key, err)
				}
				if a.Key != key || a.Size != int64(n) {
					t.Fatalf("Stat %s = %+v, want size %d", key, a, n)
				}
				// Object stores keep whole seconds; clocks of a server and
				// its client differ a little.
				if a.ModTime.Before(start.Add(-time.Minute)) || a.ModTime.After(time.Now().Add(time.Minute)) {
					t.Fatalf("Stat %s ModTime %s, want about %s", key, a.ModTime, start)
				}
				if ok, err := s.Exists(ctx, key); !ok || err != nil {
					t.Fatalf("Exists %s = %v, %v", key, ok, err)
				}
			})
		}
	}
	// Keys with spaces, unicode and dots are fine everywhere.
	for _, key := range []string{"odd/with space.json", "odd/é-ü/日本.txt", "odd/a.tmp", "odd/x.b.tmp", "odd/.hidden", "odd/a=b&c?d"} {
		if err := s.WriteAll(ctx, key, []byte(key)); err != nil {
			t.Fatalf("WriteAll %q: %v", key, err)
		}
		if got, err := s.ReadAll(ctx, key); err != nil || string(got) != key {
			t.Fatalf("ReadAll %q = %q, %v", key, got, err)
		}
	}
	listed := keysOf(listAll(t, s, "odd/", false))
	if len(listed) != 6 {
		t.Fatalf("listed %q, want the 6 odd keys", listed)
	}
}

func testOverwrite(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	for i, v := range []string{"first version", "second, longer version", "3"} {
		if err := s.WriteAll(ctx, "ow/key", []byte(v)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := s.ReadAll(ctx, "ow/key")
		if err != nil || string(got) != v {
			t.Fatalf("after write %d: %q, %v; want %q", i, got, err, v)
		}
	}
}

func testBigRoundTrip(t *testing.T, cfg Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	key := "big/blob.bin"
	data := randomBytes(cfg.BigSize, 42)
	want := sha256.Sum256(data)
	w, err := s.NewWriter(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := w.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			w.Abort()
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close %s: %v", key, err)
	}
	a, err := s.Stat(ctx, key)
	if err != nil || a.Size != int64(len(data)) {
		t.Fatalf("Stat = %+v, %v; want size %d", a, err, len(data))
	}
	r, err := s.NewReader(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	r.Close()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read back %d bytes, %v", n, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatal("content read back differs from what was written")
	}
	// A range across the 16 MiB boundary and the tail.
	for _, rg := range [][2]int64{{16<<20 - 100, 200}, {int64(len(data)) - 10, -1}} {
		off, length := rg[0], rg[1]
		if off < 0 || off >= int64(len(data)) {
			continue
		}
		rr, err := s.NewRangeReader(ctx, key, off, length)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rr)
		rr.Close()
		end := int64(len(data))
		if length >= 0 {
			end = min(off+length, end)
		}
		if err != nil || !bytes.Equal(got, data[off:end]) {
			t.Fatalf("range %d+%d: %d bytes, %v", off, length, len(got), err)
		}
	}
}

func testWriterVisibleOnlyAfterClose(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	key := "pending.bin"
	w, err := s.NewWriter(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(randomBytes(64<<10, 1)); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Exists(ctx, key); ok || err != nil {
		t.Fatalf("before Close: Exists = %v, %v; want false", ok, err)
	}
	for _, dirs := range []bool{false, true} {
		if es := listAll(t, s, "", dirs); len(es) != 0 {
			t.Fatalf("before Close: list (dirs %v) shows %q", dirs, keysOf(es))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ok, err := s.Exists(ctx, key); !ok || err != nil {
		t.Fatalf("after Close: Exists = %v, %v; want true", ok, err)
	}
	if es := listAll(t, s, "", false); !slices.Equal(keysOf(es), []string{key}) {
		t.Fatalf("after Close: list shows %q", keysOf(es))
	}
}

func testAbortLeavesNothing(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	t.Run("Abort", func(t *testing.T) {
		w, err := s.NewWriter(ctx, "abort/a.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(randomBytes(100<<10, 2)); err != nil {
			t.Fatal(err)
		}
		w.Abort()
		w.Abort()
		if err := w.Close(); err != nil {
			t.Fatalf("Close after Abort: %v", err)
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		w, err := s.NewWriter(wctx, "abort/b.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(randomBytes(100<<10, 3)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := w.Close(); err == nil {
			t.Fatal("Close after the context was cancelled succeeded")
		}
	})
	t.Run("AbortOfAnOverwrite", func(t *testing.T) {
		if err := s.WriteAll(ctx, "abort/c.bin", []byte("old")); err != nil {
			t.Fatal(err)
		}
		w, err := s.NewWriter(ctx, "abort/c.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("new")); err != nil {
			t.Fatal(err)
		}
		w.Abort()
		if got, err := s.ReadAll(ctx, "abort/c.bin"); err != nil || string(got) != "old" {
			t.Fatalf("after an aborted overwrite: %q, %v; want old", got, err)
		}
		if err := s.Delete(ctx, "abort/c.bin"); err != nil {
			t.Fatal(err)
		}
	})
	for _, key := range []string{"abort/a.bin", "abort/b.bin"} {
		if ok, err := s.Exists(ctx, key); ok || err != nil {
			t.Fatalf("Exists %s = %v, %v; want false", key, ok, err)
		}
	}
	for _, dirs := range []bool{false, true} {
		if es := listAll(t, s, "", dirs); len(es) != 0 {
			t.Fatalf("list (dirs %v) shows %q after aborted writes", dirs, keysOf(es))
		}
	}
}

func testNotFound(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	key := "missing/obj.json"
	ops := []struct {
		op string
		fn func() error
	}{
		{"stat", func() error { _, err := s.Stat(ctx, key); return err }},
		{"read", func() error { _, err := s.ReadAll(ctx, key); return err }},
		{"read", func() error {
			r, err := s.NewReader(ctx, key)
			if err == nil {
				// Some drivers report a missing object on the first Read.
				_, err = io.ReadAll(r)
				r.Close()
			}
			return err
		}},
		{"read", func() error { _, err := s.NewRangeReader(ctx, key, 10, 5); return err }},
		{"stat", func() error { _, err := s.OpenReaderAt(ctx, key); return err }},
	}
	for i, o := range ops {
		err := o.fn()
		if !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("op %d (%s): err %v, want ErrNotFound", i, o.op, err)
		}
		var se *storage.Error
		if !errors.As(err, &se) || se.Key != key || se.Op != o.op || se.URL != s.URL() {
			t.Fatalf("op %d: err %#v, want a *storage.Error for op %s key %s", i, err, o.op, key)
		}
		if msg := err.Error(); !strings.Contains(msg, key) || !strings.Contains(msg, strings.TrimSuffix(s.URL(), "/")) {
			t.Fatalf("op %d: message %q does not name the key and root", i, msg)
		}
		noSecrets(t, err.Error())
		if storage.Transient(err) {
			t.Fatalf("op %d: not found classified transient", i)
		}
	}
	if ok, err := s.Exists(ctx, key); ok || err != nil {
		t.Fatalf("Exists = %v, %v; want false, nil", ok, err)
	}
}

func testRangeReader(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	data := randomBytes(10000, 5)
	if err := s.WriteAll(ctx, "rng", data); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		off, length int64
		want        []byte
	}{
		{0, -1, data},
		{0, 10, data[:10]},
		{9990, -1, data[9990:]},
		{9990, 100, data[9990:]},
		{5000, 0, nil},
		{1234, 4321, data[1234 : 1234+4321]},
	}
	for _, c := range cases {
		r, err := s.NewRangeReader(ctx, "rng", c.off, c.length)
		if err != nil {
			t.Fatalf("range %d+%d: %v", c.off, c.length, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("range %d+%d: %d bytes, %v; want %d bytes", c.off, c.length, len(got), err, len(c.want))
		}
	}
}

func testList(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	keys := []string{"a/1", "a/2", "a/b/3", "ab", "b", "c/d/e/f", "a-b"}
	for i, k := range keys {
		if err := s.WriteAll(ctx, k, bytes.Repeat([]byte{'x'}, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	type ent struct {
		key string
		dir bool
	}
	cases := []struct {
		prefix string
		dirs   bool
		want   []ent
	}{
		{"", false, []ent{{"a-b", false}, {"a/1", false}, {"a/2", false}, {"a/b/3", false}, {"ab", false}, {"b", false}, {"c/d/e/f", false}}},
		{"a/", false, []ent{{"a/1", false}, {"a/2", false}, {"a/b/3", false}}},
		{"a", false, []ent{{"a-b", false}, {"a/1", false}, {"a/2", false}, {"a/b/3", false}, {"ab", false}}},
		{"", true, []ent{{"a-b", false}, {"a/", true}, {"ab", false}, {"b", false}, {"c/", true}}},
		{"a/", true, []ent{{"a/1", false}, {"a/2", false}, {"a/b/", true}}},
		{"c/", true, []ent{{"c/d/", true}}},
		{"c/d/e/", true, []ent{{"c/d/e/f", false}}},
		{"zzz", false, nil},
		{"zzz/", true, nil},
	}
	for _, c := range cases {
		es := listAll(t, s, c.prefix, c.dirs)
		var got []ent
		for _, e := range es {
			got = append(got, ent{e.Key, e.IsDir})
			if !e.IsDir {
				if i := slices.Index(keys, e.Key); i < 0 || e.Size != int64(i+1) {
					t.Errorf("list %q: entry %+v has the wrong size", c.prefix, e)
				}
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("list %q dirs %v = %v, want %v", c.prefix, c.dirs, got, c.want)
		}
	}
	// An error from fn stops the listing and comes back as is.
	stop := errors.New("stop here")
	calls := 0
	err := s.List(ctx, "", false, func(storage.Entry) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("List with a failing fn: err %v after %d calls; want the fn's error after 1", err, calls)
	}
}

func testListPagination(t *testing.T, cfg Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	var want []string
	for i := range cfg.ListKeys {
		// Two levels, so that the dirs listing pages over groups too.
		want = append(want, fmt.Sprintf("pg/g%02d/k%05d", i%7, i))
	}
	slices.Sort(want)
	writeAll(t, s, want, 8)
	before := s.Stats().Lists
	got := keysOf(listAll(t, s, "pg/", false))
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d keys, want %d in lexical order (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	t.Logf("%d keys in %d list requests", len(got), s.Stats().Lists-before)
	dirs := listAll(t, s, "pg/", true)
	if len(dirs) != min(7, cfg.ListKeys) {
		t.Fatalf("dirs listing: %q", keysOf(dirs))
	}
	got = keysOf(listAll(t, s, "pg/g03/", true))
	var want3 []string
	for _, k := range want {
		if strings.HasPrefix(k, "pg/g03/") {
			want3 = append(want3, k)
		}
	}
	if !slices.Equal(got, want3) {
		t.Fatalf("dirs listing of one group: %d keys, want %d", len(got), len(want3))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// writeAll writes every key with `workers` goroutines.
func writeAll(t *testing.T, s *storage.Store, keys []string, workers int) {
	t.Helper()
	ctx := ctxT(t)
	ch := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range ch {
				if err := s.WriteAll(ctx, k, []byte(k)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, k := range keys {
		select {
		case ch <- k:
		case err := <-errs:
			close(ch)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(ch)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

func testCreateExclusive(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	key := "excl/lease.json"
	if err := s.CreateExclusive(ctx, key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := s.CreateExclusive(ctx, key, []byte("second"))
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	var se *storage.Error
	if !errors.As(err, &se) || se.Op != "create" || se.Key != key {
		t.Fatalf("second create: %#v, want a *storage.Error for op create", err)
	}
	if storage.Transient(err) {
		t.Fatal("ErrExists classified transient")
	}
	noSecrets(t, err.Error())
	if got, err := s.ReadAll(ctx, key); err != nil || string(got) != "first" {
		t.Fatalf("content %q, %v; want first", got, err)
	}
	// A deleted key can be created again.
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateExclusive(ctx, key, []byte("third")); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	// Under an existing folder and in a new one.
	for _, k := range []string{"excl/sub/x", "excl2/deep/er/y"} {
		if err := s.CreateExclusive(ctx, k, []byte(k)); err != nil {
			t.Fatalf("create %s: %v", k, err)
		}
	}
	if es := listAll(t, s, "", false); len(es) != 3 {
		t.Fatalf("list after creates: %q", keysOf(es))
	}
}

func testCreateExclusiveRace(t *testing.T, cfg Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	wins := make([][]int, cfg.RaceKeys) // racers that won each key
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Racers)
	startGate := make(chan struct{})
	for r := range cfg.Racers {
		wg.Go(func() {
			order := mrand.Perm(cfg.RaceKeys)
			// Half the racers go in one shared order, so that many
			// collide on the same key at the same moment.
			if r%2 == 0 {
				slices.Sort(order)
			}
			<-startGate
			for _, k := range order {
				err := s.CreateExclusive(ctx, fmt.Sprintf("race/k%04d", k), fmt.Appendf(nil, "racer %d key %d", r, k))
				switch {
				case err == nil:
					mu.Lock()
					wins[k] = append(wins[k], r)
					mu.Unlock()
				case errors.Is(err, storage.ErrExists):
				default:
					errc <- fmt.Errorf("racer %d key %d: %w", r, k, err)
					return
				}
			}
		})
	}
	close(startGate)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	bad := 0
	for k, w := range wins {
		if len(w) != 1 {
			bad++
			if bad <= 5 {
				t.Errorf("key %d: %d winners %v, want exactly 1", k, len(w), w)
			}
			continue
		}
		got, err := s.ReadAll(ctx, fmt.Sprintf("race/k%04d", k))
		if want := fmt.Sprintf("racer %d key %d", w[0], k); err != nil || string(got) != want {
			t.Errorf("key %d: content %q, %v; want the winner's %q", k, got, err, want)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys had other than one winner", bad, cfg.RaceKeys)
	}
	if es := listAll(t, s, "race/", false); len(es) != cfg.RaceKeys {
		t.Fatalf("listed %d race keys, want %d", len(es), cfg.RaceKeys)
	}
}

func testReaderAt(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	data := randomBytes(100<<10, 7)
	if err := s.WriteAll(ctx, "ra/file.parquet", data); err != nil {
		t.Fatal(err)
	}
	ra, err := s.OpenReaderAt(ctx, "ra/file.parquet")
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	if ra.Size() != size {
		t.Fatalf("Size %d, want %d", ra.Size(), size)
	}
	cases := []struct {
		off   int64
		n     int
		wantN int
		eof   bool
	}{
		{0, 10, 10, false},
		{50000, 4096, 4096, false},
		{size - 8, 8, 8, false},
		{size - 5, 10, 5, true},
		{size, 1, 0, true},
		{size + 100, 1, 0, true},
		{10, 0, 0, false},
	}
	for _, c := range cases {
		p := make([]byte, c.n)
		n, err := ra.ReadAt(p, c.off)
		if n != c.wantN || (c.eof != (err == io.EOF)) || (!c.eof && err != nil) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d, eof %v", c.n, c.off, n, err, c.wantN, c.eof)
		}
		if n > 0 && !bytes.Equal(p[:n], data[c.off:c.off+int64(n)]) {
			t.Fatalf("ReadAt(%d bytes at %d): wrong bytes", c.n, c.off)
		}
	}
	if _, err := ra.ReadAt(make([]byte, 1), -1); err == nil {
		t.Fatal("ReadAt at a negative offset succeeded")
	}
	// Concurrent readers, as a Parquet reader fetching column chunks.
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(g), 1))
			for range 10 {
				off := r.Int64N(size)
				n := r.IntN(8192) + 1
				p := make([]byte, n)
				got, err := ra.ReadAt(p, off)
				if err != nil && err != io.EOF {
					errc <- err
					return
				}
				if !bytes.Equal(p[:got], data[off:off+int64(got)]) {
					errc <- fmt.Errorf("concurrent ReadAt at %d: wrong bytes", off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	all, err := io.ReadAll(io.NewSectionReader(ra, 0, ra.Size()))
	if err != nil || !bytes.Equal(all, data) {
		t.Fatalf("SectionReader over the ReaderAt: %d bytes, %v", len(all), err)
	}
}

func testDelete(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	if err := s.Delete(ctx, "del/never-written"); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	for _, k := range []string{"del/a", "del/sub/b"} {
		if err := s.WriteAll(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := s.Delete(ctx, "del/sub/b"); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if ok, err := s.Exists(ctx, "del/sub/b"); ok || err != nil {
		t.Fatalf("after delete: Exists = %v, %v", ok, err)
	}
	// An emptied folder no longer lists.
	if es := listAll(t, s, "del/", true); !slices.Equal(keysOf(es), []string{"del/a"}) {
		t.Fatalf("list after delete: %q", keysOf(es))
	}
}

func testInvalidKeys(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	bad := []string{"", "/abs", "dir/", "a//b", "../up", "a/../b", "./a", "a/./b", "..",
		".whale-tmp/x", "a/.whale-tmp/x", "x.attrs", "a/x.17f0123456789ab.tmp", "bad\xffutf8"}
	ops := []struct {
		name string
		fn   func(key string) error
	}{
		{"Stat", func(k string) error { _, err := s.Stat(ctx, k); return err }},
		{"Exists", func(k string) error { _, err := s.Exists(ctx, k); return err }},
		{"ReadAll", func(k string) error { _, err := s.ReadAll(ctx, k); return err }},
		{"NewReader", func(k string) error { _, err := s.NewReader(ctx, k); return err }},
		{"NewRangeReader", func(k string) error { _, err := s.NewRangeReader(ctx, k, 0, 1); return err }},
		{"OpenReaderAt", func(k string) error { _, err := s.OpenReaderAt(ctx, k); return err }},
		{"NewWriter", func(k string) error {
			w, err := s.NewWriter(ctx, k)
			if err == nil {
				w.Abort()
			}
			return err
		}},
		{"WriteAll", func(k string) error { return s.WriteAll(ctx, k, []byte("x")) }},
		{"Put", func(k string) error { return s.Put(ctx, k, strings.NewReader("x")) }},
		{"CreateExclusive", func(k string) error { return s.CreateExclusive(ctx, k, []byte("x")) }},
		{"Delete", func(k string) error { return s.Delete(ctx, k) }},
	}
	before := s.Stats()
	for _, k := range bad {
		for _, op := range ops {
			err := op.fn(k)
			if !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("%s(%q): err %v, want ErrInvalidKey", op.name, k, err)
				continue
			}
			if storage.Transient(err) {
				t.Errorf("%s(%q): invalid key classified transient", op.name, k)
			}
		}
	}
	for _, p := range []string{"/abs", "../up", "a/../b"} {
		if err := s.List(ctx, p, false, func(storage.Entry) error { return nil }); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("List(%q): err %v, want ErrInvalidKey", p, err)
		}
	}
	if after := s.Stats(); after != before {
		t.Errorf("invalid keys made requests: %+v -> %+v", before, after)
	}
	if es := listAll(t, s, "", false); len(es) != 0 {
		t.Fatalf("invalid keys wrote %q", keysOf(es))
	}
}

func testPrefixIsolation(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s1, s2 := open(t), open(t)
	if s1.URL() == s2.URL() {
		t.Fatalf("open gave the same root twice: %s", s1.URL())
	}
	ctx := ctxT(t)
	if err := s1.WriteAll(ctx, "same/key", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s2.WriteAll(ctx, "same/key", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := s1.WriteAll(ctx, "only/in/one", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s1.CreateExclusive(ctx, "lease", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s2.CreateExclusive(ctx, "lease", []byte("2")); err != nil {
		t.Fatalf("exclusive create under another prefix: %v", err)
	}
	for _, c := range []struct {
		s    *storage.Store
		want string
	}{{s1, "one"}, {s2, "two"}} {
		if got, err := c.s.ReadAll(ctx, "same/key"); err != nil || string(got) != c.want {
			t.Fatalf("%s: %q, %v; want %q", c.s.URL(), got, err, c.want)
		}
	}
	if ok, _ := s2.Exists(ctx, "only/in/one"); ok {
		t.Fatal("a key of one prefix is visible under another")
	}
	if got := keysOf(listAll(t, s2, "", false)); !slices.Equal(got, []string{"lease", "same/key"}) {
		t.Fatalf("second prefix lists %q", got)
	}
	if err := s2.Delete(ctx, "same/key"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s1.Exists(ctx, "same/key"); !ok {
		t.Fatal("a delete under one prefix removed the key of another")
	}
}

func testStats(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	b := s.Stats()
	_ = s.WriteAll(ctx, "st", []byte("x"))
	_, _ = s.ReadAll(ctx, "st")
	_, _ = s.Stat(ctx, "st")
	_ = s.List(ctx, "", false, func(storage.Entry) error { return nil })
	_ = s.Delete(ctx, "st")
	a := s.Stats()
	if a.Writes != b.Writes+1 || a.Reads != b.Reads+1 || a.Stats != b.Stats+1 || a.Lists != b.Lists+1 || a.Deletes != b.Deletes+1 {
		t.Fatalf("one of each request: %+v -> %+v", b, a)
	}
}
