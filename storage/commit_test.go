package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
)

// forEachStore runs fn against a fresh mem://, file:// and S3 (versitygw)
// root. The S3 run is skipped only in -short mode without a versitygw
// binary (see internal/s3test).
func forEachStore(t *testing.T, fn func(t *testing.T, s *Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, memStore(t)) })
	t.Run("file", func(t *testing.T) { fn(t, fileStore(t)) })
	t.Run("s3", func(t *testing.T) { fn(t, openTest(t, s3test.NewBucketURL(t))) })
}

func memStore(t testing.TB) *Store {
	return openTest(t, "mem://")
}

func fileStore(t testing.TB) *Store {
	return openTest(t, "file://"+t.TempDir())
}

func openTest(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, &Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustIdentity(t testing.TB, run, pos, stage string, cfg any, seed int64, shards int) Identity {
	t.Helper()
	id, err := NewIdentity(run, pos, stage, nil, cfg, seed, shards)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// writeShard runs one try of a shard that writes one file of rows lines.
func writeShard(t testing.TB, a *Attempt, shard int, rows int) (*ShardWriter, bool) {
	t.Helper()
	ctx := context.Background()
	w, err := a.NewShard(shard)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := w.Create(ctx, "rows", "txt")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		fmt.Fprintf(pw, "shard %d row %d\n", shard, i)
	}
	if _, err := pw.Finish(int64(rows)); err != nil {
		t.Fatal(err)
	}
	w.SetSummary("rows", rows)
	won, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w, won
}

func commitSimple(t testing.TB, s *Store, run, pos, stage string, cfg any, seed int64) *Manifest {
	t.Helper()
	a, err := OpenAttempt(context.Background(), s, mustIdentity(t, run, pos, stage, cfg, seed, 1), AttemptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeShard(t, a, 0, 3)
	m, won, err := a.Commit(context.Background())
	if err != nil || !won {
		t.Fatalf("commit: %v (won %v)", err, won)
	}
	return m
}

func TestCommitVisibility(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		id := mustIdentity(t, "run", "r001-w01", "rollout", map[string]any{"g": 4}, 1, 2)
		a, err := OpenAttempt(ctx, s, id, AttemptOptions{WhaleVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if a.Folder.String() != "r001-w01-rollout" || a.Dir != "runs/run/stages/r001-w01-rollout" {
			t.Fatalf("attempt folder %s at %s", a.Folder, a.Dir)
		}
		invisible := func(when string) {
			t.Helper()
			if _, err := LatestCommitted(ctx, s, "run", "r001-w01", "rollout"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: LatestCommitted = %v, want ErrNotFound", when, err)
			}
			if ms, err := ListCommitted(ctx, s, "run"); err != nil || len(ms) != 0 {
				t.Fatalf("%s: ListCommitted = %d manifests, %v", when, len(ms), err)
			}
		}
		invisible("after _INPUTS.json")
		writeShard(t, a, 1, 5)
		invisible("after one part")
		if _, _, err := a.Commit(ctx); !errors.Is(err, ErrPartsMissing) || !strings.Contains(err.Error(), "shard 0") {
			t.Fatalf("commit with shard 0 missing: %v", err)
		}
		invisible("after a refused commit")
		writeShard(t, a, 0, 3)
		m, won, err := a.Commit(ctx)
		if err != nil || !won {
			t.Fatalf("commit: %v %v", won, err)
		}
		got, err := LatestCommitted(ctx, s, "run", "r001-w01", "rollout")
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest != m.Digest || got.Key != m.Key || got.Dir != a.Dir {
			t.Fatalf("LatestCommitted = %s %s, committed %s %s", got.Key, got.Digest, m.Key, m.Digest)
		}
		if len(got.Files) != 2 || got.Files[0].Shard != 0 || got.Files[1].Shard != 1 || got.Rows("rows") != 8 {
			t.Fatalf("files = %+v", got.Files)
		}
		if got.Summary["rows"] != 8.0 || got.Parts[1].Summary["rows"] != 5.0 {
			t.Fatalf("summary %v, parts %+v", got.Summary, got.Parts)
		}
		if got.WhaleVersion != "test" || got.Attempt != 1 || got.Shards != 2 || got.Seed != 1 {
			t.Fatalf("manifest fields: %+v", got)
		}
		if !strings.HasPrefix(got.Files[0].Name, "rows-00000-of-00002.") || !strings.HasSuffix(got.Files[0].Name, ".txt") {
			t.Fatalf("file name %s", got.Files[0].Name)
		}
		if err := Verify(ctx, s, got, true); err != nil {
			t.Fatal(err)
		}
		r, err := got.NewFileReader(ctx, s, got.Files[1])
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(r)
		r.Close()
		if strings.Count(string(data), "\n") != 5 {
			t.Fatalf("shard 1 file: %q", data)
		}
		ms, err := ListCommitted(ctx, s, "run")
		if err != nil || len(ms) != 1 || ms[0].Digest != m.Digest {
			t.Fatalf("ListCommitted: %d, %v", len(ms), err)
		}
		// Committing again is a no-op that returns the same manifest.
		m2, won, err := a.Commit(ctx)
		if err != nil || won || m2.Digest != m.Digest {
			t.Fatalf("second commit: %v %v", won, err)
		}
	})
}

func TestOpenAttemptDecisions(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		cfg1 := map[string]any{"threshold": 0.5}
		cfg2 := map[string]any{"threshold": 0.7}
		m1 := commitSimple(t, s, "run", "r001-w01", "filter", cfg1, 1)

		same, err := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg1, 1, 1), AttemptOptions{})
		if err != nil || same.Committed == nil || same.Committed.Digest != m1.Digest {
			t.Fatalf("same identity: %+v, %v", same, err)
		}

		_, err = OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg2, 2, 1), AttemptOptions{})
		var de *DiffError
		if !errors.As(err, &de) || !errors.Is(err, ErrInputsDiffer) {
			t.Fatalf("different identity: %v", err)
		}
		for _, want := range []string{"config.threshold: 0.5 → 0.7", "seed: 1 → 2", "--force", "attempt 2"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}

		forced, err := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg2, 2, 1), AttemptOptions{Force: true})
		if err != nil || forced.Folder.Attempt != 2 || forced.Dir != "runs/run/stages/r001-w01-filter.a2" {
			t.Fatalf("forced: %+v, %v", forced, err)
		}
		// Until a2 commits, a1 stays the current result.
		if m, _ := LatestCommitted(ctx, s, "run", "r001-w01", "filter"); m == nil || m.Attempt != 1 {
			t.Fatalf("latest before a2 commits: %+v", m)
		}
		// Another shard of the same forced execution joins a2.
		joined, err := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg2, 2, 1), AttemptOptions{Force: true})
		if err != nil || joined.Folder.Attempt != 2 || !joined.Resumed {
			t.Fatalf("join forced attempt: %+v, %v", joined, err)
		}
		// Without --force, a1 is committed and differs: still an error.
		if _, err := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg2, 2, 1), AttemptOptions{}); !errors.Is(err, ErrInputsDiffer) {
			t.Fatalf("unforced against committed a1: %v", err)
		}
		// A third identity with --force while a2 is unfinished starts a3.
		third, err := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "filter", cfg2, 3, 1), AttemptOptions{Force: true})
		if err != nil || third.Folder.Attempt != 3 {
			t.Fatalf("force over an unfinished attempt: %+v, %v", third, err)
		}
		writeShard(t, forced, 0, 2)
		if _, _, err := forced.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		latest, err := LatestCommitted(ctx, s, "run", "r001-w01", "filter")
		if err != nil || latest.Attempt != 2 {
			t.Fatalf("latest after a2 commits: %+v, %v", latest, err)
		}
		if old, err := ReadManifest(ctx, s, m1.Dir); err != nil || old.Digest != m1.Digest {
			t.Fatalf("old attempt not kept: %v", err)
		}
		if ms, _ := ListCommitted(ctx, s, "run"); len(ms) != 1 || ms[0].Attempt != 2 {
			t.Fatalf("ListCommitted should give the current result only: %d", len(ms))
		}
	})
}

func TestOpenAttemptPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		id := mustIdentity(t, "run", "r002-h01", "propose", "a", 1, 3)
		a, err := OpenAttempt(ctx, s, id, AttemptOptions{})
		if err != nil || a.Resumed {
			t.Fatal(err)
		}
		writeShard(t, a, 2, 1)
		b, err := OpenAttempt(ctx, s, id, AttemptOptions{})
		if err != nil || !b.Resumed || b.Dir != a.Dir {
			t.Fatalf("resume: %+v, %v", b, err)
		}
		if ok, err := b.PartCommitted(ctx, 2); !ok || err != nil {
			t.Fatalf("shard 2 committed: %v %v", ok, err)
		}
		if ok, _ := b.PartCommitted(ctx, 0); ok {
			t.Fatal("shard 0 reported committed")
		}
		other := mustIdentity(t, "run", "r002-h01", "propose", "b", 1, 3)
		_, err = OpenAttempt(ctx, s, other, AttemptOptions{})
		if !errors.Is(err, ErrInputsDiffer) || !strings.Contains(err.Error(), "not committed") || !strings.Contains(err.Error(), `config: "a" → "b"`) {
			t.Fatalf("different identity over an unfinished attempt: %v", err)
		}
		f, err := OpenAttempt(ctx, s, other, AttemptOptions{Force: true})
		if err != nil || f.Folder.Attempt != 2 {
			t.Fatalf("force over unfinished: %+v %v", f, err)
		}
	})
}

func TestShardCommitRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		id := mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 1)
		const tries = 6
		var wg sync.WaitGroup
		wins := make([]bool, tries)
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := OpenAttempt(ctx, s, id, AttemptOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				_, wins[i] = writeShard(t, a, 0, 2)
				if _, _, err := a.Commit(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		n := 0
		for _, w := range wins {
			if w {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d tries committed shard 0, want exactly 1", n)
		}
		m, err := LatestCommitted(ctx, s, "run", "r001-w01", "rollout")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Files) != 1 {
			t.Fatalf("manifest names %d files", len(m.Files))
		}
		g, err := Garbage(ctx, s, "run", -time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(g) != tries-1 {
			t.Fatalf("garbage = %d objects, want the %d losers' files: %+v", len(g), tries-1, g)
		}
		for _, e := range g {
			if strings.Contains(e.Key, m.Parts[0].Token) {
				t.Fatalf("garbage lists the winner's file %s", e.Key)
			}
		}
		if g, _ := Garbage(ctx, s, "run", time.Hour); len(g) != 0 {
			t.Fatalf("fresh files listed as garbage: %d", len(g))
		}
	})
}

func TestStageCommitRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		id := mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 4)
		a, err := OpenAttempt(ctx, s, id, AttemptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Out of order.
		for _, sh := range []int{3, 1, 0, 2} {
			writeShard(t, a, sh, sh+1)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, digests := 0, map[string]bool{}
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := OpenAttempt(ctx, s, id, AttemptOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				m, w, err := b.Commit(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if w {
					won++
				}
				digests[m.Digest] = true
			}()
		}
		wg.Wait()
		if won != 1 || len(digests) != 1 {
			t.Fatalf("%d commits won, %d distinct manifests; want 1 and 1", won, len(digests))
		}
		m, _ := LatestCommitted(ctx, s, "run", "r001-w01", "rollout")
		for i, f := range m.Files {
			if f.Shard != i || f.Rows != int64(i+1) {
				t.Fatalf("file %d: %+v", i, f)
			}
		}
	})
}

func TestFinalize(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if _, err := Finalize(ctx, s, "run", "r001-w01", "rollout", AttemptOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("finalize with no attempt: %v", err)
		}
		id := mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 6)
		a, _ := OpenAttempt(ctx, s, id, AttemptOptions{})
		for _, sh := range []int{0, 2, 5} {
			writeShard(t, a, sh, 1)
		}
		_, err := Finalize(ctx, s, "run", "r001-w01", "rollout", AttemptOptions{})
		var mp *MissingPartsError
		if !errors.As(err, &mp) || fmt.Sprint(mp.Missing) != "[1 3 4]" || !strings.Contains(err.Error(), "shard 1, 3-4") {
			t.Fatalf("finalize with shards missing: %v", err)
		}
		for _, sh := range []int{1, 3, 4} {
			writeShard(t, a, sh, 1)
		}
		m, err := Finalize(ctx, s, "run", "r001-w01", "rollout", AttemptOptions{})
		if err != nil || len(m.Files) != 6 {
			t.Fatalf("finalize: %v", err)
		}
		again, err := Finalize(ctx, s, "run", "r001-w01", "rollout", AttemptOptions{})
		if err != nil || again.Digest != m.Digest {
			t.Fatalf("finalize again: %v", err)
		}
		found, err := FindAttempt(ctx, s, id, AttemptOptions{})
		if err != nil || found.Committed == nil {
			t.Fatalf("FindAttempt: %+v %v", found, err)
		}
		if _, err := FindAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "rollout", nil, 2, 6), AttemptOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("FindAttempt of an unknown identity: %v", err)
		}
	})
}

func TestVerify(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		id := mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 3)
		a, _ := OpenAttempt(ctx, s, id, AttemptOptions{})
		for sh := range 3 {
			writeShard(t, a, sh, 4)
		}
		m, _, err := a.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(ctx, s, m, true); err != nil {
			t.Fatalf("fresh stage: %v", err)
		}
		if err := s.Delete(ctx, m.FileKey(m.Files[0])); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteAll(ctx, m.FileKey(m.Files[1]), []byte("short")); err != nil {
			t.Fatal(err)
		}
		// Same size, other bytes: only the checksum pass sees it.
		data, _ := s.ReadAll(ctx, m.FileKey(m.Files[2]))
		data[0] ^= 1
		if err := s.WriteAll(ctx, m.FileKey(m.Files[2]), data); err != nil {
			t.Fatal(err)
		}
		err = Verify(ctx, s, m, false)
		var ve *VerifyError
		if !errors.As(err, &ve) || len(ve.Problems) != 2 || !strings.Contains(ve.Problems[0], "missing") || !strings.Contains(ve.Problems[1], "bytes, manifest says") {
			t.Fatalf("verify sizes: %v", err)
		}
		err = Verify(ctx, s, m, true)
		if !errors.As(err, &ve) || len(ve.Problems) != 3 || !strings.Contains(ve.Problems[2], "hashes to") {
			t.Fatalf("verify checksums: %v", err)
		}
		if _, err := m.OpenFile(ctx, s, m.Files[1]); err == nil || !strings.Contains(err.Error(), "changed after commit") {
			t.Fatalf("OpenFile of a resized file: %v", err)
		}
	})
}

func TestGarbageUncommitted(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a, _ := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 2), AttemptOptions{})
		writeShard(t, a, 0, 1)
		commitSimple(t, s, "run", "r001-w01", "filter", nil, 1)
		g, err := Garbage(ctx, s, "run", -time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// _INPUTS.json, the part manifest and the data file of the
		// unfinished rollout; nothing of the committed filter.
		if len(g) != 3 {
			t.Fatalf("garbage: %+v", g)
		}
		for _, e := range g {
			if !strings.HasPrefix(e.Key, a.Dir+"/") {
				t.Fatalf("garbage outside the unfinished attempt: %s", e.Key)
			}
		}
		if g, _ := Garbage(ctx, s, "run", time.Hour); len(g) != 0 {
			t.Fatalf("a recent unfinished attempt listed as garbage: %+v", g)
		}
	})
}

func TestShardWriterRules(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	a, _ := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 2), AttemptOptions{})
	if _, err := a.NewShard(2); err == nil {
		t.Fatal("shard 2 of 2 accepted")
	}
	w, _ := a.NewShard(0)
	for _, bad := range [][2]string{{"Rows", "txt"}, {"rows", "t.xt"}, {"", "txt"}, {"rows", ""}} {
		if _, err := w.Create(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("Create(%q, %q) accepted", bad[0], bad[1])
		}
	}
	p1, _ := w.Create(ctx, "rows", "txt")
	p2, _ := w.Create(ctx, "rows", "txt")
	if p1.Key() == p2.Key() || !strings.HasSuffix(p2.Key(), "."+w.Token()+".1.txt") {
		t.Fatalf("names %s and %s", p1.Key(), p2.Key())
	}
	p1.Close()
	if _, err := w.Commit(ctx); err == nil || !strings.Contains(err.Error(), "not closed") {
		t.Fatalf("commit with an open file: %v", err)
	}
	p2.Abort()
	w.SetSummary("bad", func() {})
	if _, err := w.Commit(ctx); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Fatalf("commit with a bad summary: %v", err)
	}
}

func TestMergeSum(t *testing.T) {
	tests := []struct {
		name    string
		parts   []map[string]any
		want    string
		wantErr bool
	}{
		{"one shard kept", []map[string]any{{"mean": 0.5, "k": "x"}}, "map[k:x mean:0.5]", false},
		{"numbers add", []map[string]any{{"n": 1.0, "m": 2.0}, {"n": 3.0}}, "map[m:2 n:4]", false},
		{"equal strings", []map[string]any{{"model": "a"}, {"model": "a"}}, "map[model:a]", false},
		{"different strings", []map[string]any{{"model": "a"}, {"model": "b"}}, "", true},
		{"number then string", []map[string]any{{"x": 1.0}, {"x": "b"}}, "", true},
		{"empty", []map[string]any{{}, {}}, "map[]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MergeSum(tt.parts)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("MergeSum = %v, want an error", got)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != tt.want {
				t.Fatalf("MergeSum = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestCommitUsesMerge(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	merge := func(parts []map[string]any) (map[string]any, error) {
		var hi float64
		for _, p := range parts {
			hi = max(hi, p["rows"].(float64))
		}
		return map[string]any{"max_rows": hi}, nil
	}
	a, _ := OpenAttempt(ctx, s, mustIdentity(t, "run", "r001-w01", "rollout", nil, 1, 2), AttemptOptions{Merge: merge})
	writeShard(t, a, 0, 7)
	writeShard(t, a, 1, 2)
	m, _, err := a.Commit(ctx)
	if err != nil || m.Summary["max_rows"] != 7.0 {
		t.Fatalf("summary %v, %v", m.Summary, err)
	}
}
