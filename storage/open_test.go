package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/storage"
)

// A root that must exist is not created: a mistyped path says so.
func TestOpenMustExist(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "typo", "bucket")
	for _, url := range []string{"file://" + missing, "file://" + dir + "?prefix=typo/x"} {
		_, err := storage.Open(ctx, url, &storage.Options{MustExist: true})
		if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s: %v", url, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "typo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opening created %s (%v)", filepath.Join(dir, "typo"), err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.Open(ctx, "file://"+file, &storage.Options{MustExist: true}); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file as the root: %v", err)
	}

	// Without MustExist the root is made, prefix folder and all on first
	// write; with it an existing one opens.
	s, err := storage.Open(ctx, "file://"+missing+"?prefix=p", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAll(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = storage.Open(ctx, "file://"+missing+"?prefix=p", &storage.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.ReadAll(ctx, "k"); err != nil || string(b) != "v" {
		t.Errorf("read back %q, %v", b, err)
	}
	s.Close()
}

// A prefix is a relative path of names, on every scheme: ../../etc would
// lead a file:// root out of its directory.
func TestOpenBadPrefix(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, url := range []string{
		"file://" + dir + "?prefix=../../etc",
		"file://" + dir + "?prefix=a/../../b",
		"file://" + dir + "?prefix=a//b",
		"file://" + dir + "?prefix=./a",
		"file://" + dir + "?prefix=a/.whale-tmp",
		"mem://?prefix=../x",
		"s3://bucket/a/../../etc?endpoint=http://127.0.0.1:1&region=us-east-1",
		"s3://bucket/x?prefix=..&endpoint=http://127.0.0.1:1&region=us-east-1",
	} {
		_, err := storage.Open(ctx, url, nil)
		if !errors.Is(err, storage.ErrInvalidKey) || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("%s: %v", url, err)
		}
	}
	for _, url := range []string{"file://" + dir + "?prefix=/team/whale/", "mem://?prefix=a/b"} {
		s, err := storage.Open(ctx, url, nil)
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		s.Close()
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("a bad prefix wrote beside the root: %v", entries)
	}
}
