package archive

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func forEachStore(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	open := func(t *testing.T, url string) *storage.Store {
		s, err := storage.Open(context.Background(), url, &storage.Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("mem", func(t *testing.T) { fn(t, open(t, "mem://")) })
	t.Run("file", func(t *testing.T) { fn(t, open(t, "file://"+t.TempDir())) })
	t.Run("s3", func(t *testing.T) { fn(t, open(t, s3test.NewBucketURL(t))) })
}

func TestPutGet(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		src := []byte("MAX_TURNS = 3\n")
		id, err := Put(ctx, s, src)
		if err != nil {
			t.Fatal(err)
		}
		if id != harness.SourceID(src) {
			t.Fatalf("id %s, want %s", id, harness.SourceID(src))
		}
		key, _ := Key(id)
		if want := "harnesses/" + strings.TrimPrefix(id, "sha256:") + "/harness.star"; key != want {
			t.Fatalf("key %s, want %s", key, want)
		}
		// Storing it again is a no-op, not an error.
		if again, err := Put(ctx, s, src); err != nil || again != id {
			t.Fatalf("second put: %s %v", again, err)
		}
		got, err := Get(ctx, s, id)
		if err != nil || string(got) != string(src) {
			t.Fatalf("get: %q %v", got, err)
		}

		other := harness.SourceID([]byte("other"))
		_, err = Get(ctx, s, other)
		if !errors.Is(err, ErrNotFound) || !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), strings.TrimPrefix(other, "sha256:")) {
			t.Fatalf("missing harness: %v", err)
		}

		// Bytes under a key that do not hash to it: Get refuses them,
		// and Put does not paper over them.
		tampered := []byte("MAX_TURNS = 4\n")
		tid := harness.SourceID(tampered)
		tkey, _ := Key(tid)
		if err := s.WriteAll(ctx, tkey, []byte("MAX_TURNS = 5\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := Get(ctx, s, tid); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tkey) {
			t.Fatalf("tampered get: %v", err)
		}
		if _, err := Put(ctx, s, tampered); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tkey) {
			t.Fatalf("put over tampered: %v", err)
		}
	})
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct{ name, id, want string }{
		{"no prefix", strings.Repeat("a", 64), "want sha256:"},
		{"short", "sha256:abc", "want sha256:"},
		{"upper", "sha256:" + strings.Repeat("A", 64), "lowercase"},
		{"path", "sha256:" + strings.Repeat("a", 61) + "/..", "lowercase"},
		{"h0", "h0", "want sha256:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Get(ctx, s, c.id); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Get(%q) = %v, want an error mentioning %q", c.id, err, c.want)
			}
		})
	}
	if _, err := Put(ctx, s, nil); err == nil {
		t.Fatal("empty source accepted")
	}
	if _, err := Put(ctx, s, make([]byte, harness.MaxSourceBytes+1)); err == nil {
		t.Fatal("oversized source accepted")
	}
}

func FuzzParseID(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("0", 64))
	f.Add("h0")
	f.Add("sha256:")
	f.Fuzz(func(t *testing.T, id string) {
		h, err := ParseID(id)
		if err != nil {
			return
		}
		// Whatever parses must make a safe key: no traversal, no
		// separators beyond the archive's own.
		key, err := Key(id)
		if err != nil || strings.Contains(h, "/") || strings.Contains(key, "..") || id != "sha256:"+h {
			t.Fatalf("ParseID(%q) = %q, key %q, %v", id, h, key, err)
		}
	})
}
