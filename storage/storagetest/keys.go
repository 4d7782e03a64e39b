package storagetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/storage"
)

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
