package ledger

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func forEachStore(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	roots := map[string]func(t *testing.T) string{
		"mem":  func(*testing.T) string { return "mem://" },
		"file": func(t *testing.T) string { return "file://" + t.TempDir() },
		"s3":   func(t *testing.T) string { return s3test.NewBucketURL(t) },
	}
	for _, name := range []string{"mem", "file", "s3"} {
		t.Run(name, func(t *testing.T) {
			s, err := storage.Open(context.Background(), roots[name](t), &storage.Options{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			fn(t, s)
		})
	}
}

func TestConcurrentAppendsGetDistinctSequenceNumbers(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		const writers, each = 6, 4
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					_, err := Append(ctx, s, "r1", Entry{Kind: KindDecision, Position: "r001-w01", Reason: strings.Repeat("x", w+i)})
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := Read(ctx, s, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != writers*each {
			t.Fatalf("%d entries, want %d", len(got), writers*each)
		}
		for i, e := range got {
			if e.Seq != i+1 {
				t.Fatalf("entry %d has seq %d: sequence has a gap or a duplicate", i, e.Seq)
			}
			if e.Time.IsZero() {
				t.Errorf("entry %d has no time", e.Seq)
			}
		}
		other, err := Read(ctx, s, "r2")
		if err != nil || len(other) != 0 {
			t.Errorf("another run's ledger: %v, %v; want empty", other, err)
		}
	})
}

func TestReadNamesACorruptEntry(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Append(ctx, s, "r1", Entry{Kind: KindDone}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAll(ctx, key("r1", 2), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	// Files that are not entries are ignored.
	if err := s.WriteAll(ctx, Prefix("r1")+"notes.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_, err = Read(ctx, s, "r1")
	if err == nil || !strings.Contains(err.Error(), "runs/r1/ledger/000002.json") {
		t.Fatalf("error %v, want one naming runs/r1/ledger/000002.json", err)
	}
	e, err := Append(ctx, s, "r1", Entry{Kind: KindDone})
	if err != nil || e.Seq != 3 {
		t.Fatalf("append after a corrupt entry: seq %d, %v; want 3", e.Seq, err)
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name string
		seq  int
		ok   bool
	}{
		{"000001.json", 1, true},
		{"1234567.json", 1234567, true},
		{"000000.json", 0, false},
		{"00001.json", 0, false},
		{"000001.txt", 0, false},
		{"abcdef.json", 0, false},
	}
	for _, tt := range tests {
		seq, ok := parseName(tt.name)
		if seq != tt.seq || ok != tt.ok {
			t.Errorf("parseName(%q) = %d, %v; want %d, %v", tt.name, seq, ok, tt.seq, tt.ok)
		}
	}
}
