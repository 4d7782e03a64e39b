package storage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/whalerun/whale/storage"
)

// fileblob walks a folder and then stats each file; a writer renaming its
// temporary file into place in between used to fail the whole listing with
// NotFound. Listing a folder that others are writing into must just work.
func TestFileListWhileWriting(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "file://"+t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers, objects = 4, 150
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range objects {
				if err := s.WriteAll(ctx, fmt.Sprintf("stage/w%d-%04d.txt", w, i), []byte("row\n")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	lists := 0
	for {
		select {
		case <-done:
			n := 0
			if err := s.List(ctx, "stage/", false, func(storage.Entry) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != writers*objects {
				t.Fatalf("listed %d objects after the writers finished, want %d", n, writers*objects)
			}
			t.Logf("%d listings raced the writers", lists)
			return
		default:
		}
		if err := s.List(ctx, "stage/", false, func(storage.Entry) error { return nil }); err != nil {
			t.Fatalf("listing %d while writing: %v", lists, err)
		}
		lists++
	}
}
