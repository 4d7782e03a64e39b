package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/storage"
)

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
