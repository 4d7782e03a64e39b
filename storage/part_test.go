package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"testing"
)

func TestPartWriter(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		spool := s.tempDir
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
		const chunks = 40
		w, err := s.NewPartWriter(ctx, "d/part.bin")
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		for range chunks {
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
			h.Write(chunk)
		}
		// Nothing reaches the bucket before Close, and the spool has no name
		// a crash could leave behind.
		if ok, err := s.Exists(ctx, "d/part.bin"); ok || err != nil {
			t.Fatalf("object visible before Close: %v %v", ok, err)
		}
		if ents, _ := os.ReadDir(spool); len(ents) != 0 {
			t.Fatalf("spool directory holds %d named files while writing", len(ents))
		}
		e, err := w.Finish(123)
		if err != nil {
			t.Fatal(err)
		}
		want := FileEntry{Name: "part.bin", Size: chunks * int64(len(chunk)), SHA256: "sha256:" + hex.EncodeToString(h.Sum(nil)), Rows: 123}
		if e != want {
			t.Fatalf("entry = %+v\nwant %+v", e, want)
		}
		got, err := s.ReadAll(ctx, "d/part.bin")
		if err != nil {
			t.Fatal(err)
		}
		if DigestBytes(got) != want.SHA256 {
			t.Fatalf("uploaded bytes hash to %s", DigestBytes(got))
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Write after Close: %v", err)
		}
	})
}

func TestPartWriterAbort(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		w, err := s.NewPartWriter(ctx, "d/aborted.bin")
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("some bytes"))
		w.Abort()
		if err := w.Close(); err == nil {
			t.Fatal("Close after Abort succeeded")
		}
		if ok, _ := s.Exists(ctx, "d/aborted.bin"); ok {
			t.Fatal("aborted part was uploaded")
		}
		if ents, _ := os.ReadDir(s.tempDir); len(ents) != 0 {
			t.Fatalf("spool left behind: %d files", len(ents))
		}
	})
}

func TestPartWriterCancelledUpload(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := s.NewPartWriter(ctx, "d/cancelled.bin")
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		cancel()
		if err := w.Close(); err == nil {
			t.Fatal("Close under a cancelled context succeeded")
		}
		if ok, _ := s.Exists(context.Background(), "d/cancelled.bin"); ok {
			t.Fatal("cancelled upload is visible")
		}
	})
}
