package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/storage"
)

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
