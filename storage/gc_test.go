package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// gcPos is the position every stage of these tests runs at.
const gcPos = "r001-w01"

// openGC opens an attempt of stage at gcPos in run "run", one shard.
func openGC(t *testing.T, s *Store, stage string, cfg any, inputs []Input, force bool) *Attempt {
	t.Helper()
	id, err := NewIdentity("run", gcPos, stage, inputs, cfg, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := OpenAttempt(context.Background(), s, id, AttemptOptions{Force: force})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// commitGC commits an attempt of stage at gcPos with one file of 3 rows.
func commitGC(t *testing.T, s *Store, stage string, cfg any, inputs []Input, force bool) *Manifest {
	t.Helper()
	a := openGC(t, s, stage, cfg, inputs, force)
	writeShard(t, a, 0, 3)
	m, won, err := a.Commit(context.Background())
	if err != nil || !won {
		t.Fatalf("commit %s: %v (won %v)", a.Dir, err, won)
	}
	return m
}

// crashedTry uploads one file of a try of shard 0 that never commits.
func crashedTry(t *testing.T, a *Attempt) {
	t.Helper()
	w, err := a.NewShard(0)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := w.Create(context.Background(), "rows", "txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write([]byte("crashed\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Finish(1); err != nil {
		t.Fatal(err)
	}
}

// newestIn is the newest ModTime of the objects under dir.
func newestIn(t *testing.T, s *Store, dir string) time.Time {
	t.Helper()
	var newest time.Time
	err := s.List(context.Background(), dir+"/", false, func(e Entry) error {
		if e.ModTime.After(newest) {
			newest = e.ModTime
		}
		return nil
	})
	if err != nil || newest.IsZero() {
		t.Fatalf("list %s: %v (newest %v)", dir, err, newest)
	}
	return newest
}

// keysUnder lists every key of the store.
func keysUnder(t *testing.T, s *Store) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), "", false, func(e Entry) error {
		keys = append(keys, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

var tokenRE = regexp.MustCompile(`\.[0-9a-f]{12}\.`)

// render writes entries as "<folder>/<name> <why>", with the random
// token of data file names as "*".
func render(g []GarbageEntry) []string {
	var out []string
	for _, e := range g {
		out = append(out, tokenRE.ReplaceAllString(strings.TrimPrefix(e.Key, StagesPrefix("run")), ".*.")+" "+e.Why())
	}
	return out
}

var (
	future = func() time.Time { return time.Now().Add(time.Hour) }  // everything is older
	past   = func() time.Time { return time.Now().Add(-time.Hour) } // nothing is older
)

// wholeAttempt is what Garbage lists of a one-shard attempt folder that
// writeShard wrote, in deletion order.
func wholeAttempt(folder, why string, committed bool) []string {
	var out []string
	if committed {
		out = append(out, folder+"/_MANIFEST.json "+why)
	}
	return append(out, folder+"/_INPUTS.json "+why, folder+"/_parts/00000-of-00001.json "+why,
		folder+"/rows-00000-of-00001.*.txt "+why)
}

// TestGarbageCollect builds a run's stage folders, lists their garbage,
// deletes it, and checks that exactly what was listed went, that the
// listing itself deleted nothing, and that every current result is still
// committed, the same, and verifies.
func TestGarbageCollect(t *testing.T) {
	cases := []struct {
		name  string
		build func(t *testing.T, s *Store) (cutoff time.Time)
		want  []string
	}{
		{"a committed stage has no garbage", func(t *testing.T, s *Store) time.Time {
			commitGC(t, s, "rollout", "a", nil, false)
			return future()
		}, nil},
		{"files of crashed and losing tries are not in the manifest", func(t *testing.T, s *Store) time.Time {
			a := openGC(t, s, "rollout", "a", nil, false)
			crashedTry(t, a)
			writeShard(t, a, 0, 3)
			if _, won := writeShard(t, a, 0, 2); won {
				t.Fatal("a second try of shard 0 committed")
			}
			if _, _, err := a.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			return future()
		}, []string{
			"r001-w01-rollout/rows-00000-of-00001.*.txt not in manifest",
			"r001-w01-rollout/rows-00000-of-00001.*.txt not in manifest",
		}},
		{"fresh leftovers stay", func(t *testing.T, s *Store) time.Time {
			a := openGC(t, s, "rollout", "a", nil, false)
			crashedTry(t, a)
			writeShard(t, a, 0, 3)
			if _, _, err := a.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			return past()
		}, nil},
		{"an uncommitted attempt past the age goes whole, identity first", func(t *testing.T, s *Store) time.Time {
			writeShard(t, openGC(t, s, "rollout", "a", nil, false), 0, 1)
			return future()
		}, wholeAttempt("r001-w01-rollout", "uncommitted attempt", false)},
		{"an uncommitted attempt within the age stays", func(t *testing.T, s *Store) time.Time {
			writeShard(t, openGC(t, s, "rollout", "a", nil, false), 0, 1)
			return past()
		}, nil},
		{"an uncommitted attempt above the latest committed one goes", func(t *testing.T, s *Store) time.Time {
			commitGC(t, s, "rollout", "a", nil, false)
			writeShard(t, openGC(t, s, "rollout", "b", nil, true), 0, 1)
			return future()
		}, wholeAttempt("r001-w01-rollout.a2", "uncommitted attempt", false)},
		{"a forced rerun's old attempt goes, manifest first", func(t *testing.T, s *Store) time.Time {
			commitGC(t, s, "rollout", "a", nil, false)
			commitGC(t, s, "rollout", "b", nil, true)
			return future()
		}, wholeAttempt("r001-w01-rollout", "superseded by attempt 2", true)},
		{"each superseded attempt names the attempt that replaced it", func(t *testing.T, s *Store) time.Time {
			commitGC(t, s, "rollout", "a", nil, false)
			commitGC(t, s, "rollout", "b", nil, true)
			commitGC(t, s, "rollout", "c", nil, true)
			return future()
		}, slices.Concat(wholeAttempt("r001-w01-rollout", "superseded by attempt 2", true),
			wholeAttempt("r001-w01-rollout.a2", "superseded by attempt 3", true))},
		{"an attempt superseded within the age stays, however old", func(t *testing.T, s *Store) time.Time {
			a1 := commitGC(t, s, "rollout", "a", nil, false)
			old := newestIn(t, s, a1.Dir)
			// S3 keeps modification times to the second.
			time.Sleep(time.Until(old.Add(1100 * time.Millisecond)))
			commitGC(t, s, "rollout", "b", nil, true)
			return old.Add(500 * time.Millisecond)
		}, nil},
		{"a superseded attempt that a current stage reads stays", func(t *testing.T, s *Store) time.Time {
			r1 := commitGC(t, s, "rollout", "a", nil, false)
			commitGC(t, s, "filter", "a", []Input{r1.AsInput("rollouts")}, false)
			commitGC(t, s, "rollout", "b", nil, true)
			return future()
		}, nil},
		{"a superseded attempt that a kept one reads stays too", func(t *testing.T, s *Store) time.Time {
			r1 := commitGC(t, s, "rollout", "a", nil, false)
			f1 := commitGC(t, s, "filter", "a", []Input{r1.AsInput("rollouts")}, false)
			commitGC(t, s, "finetune", "a", []Input{f1.AsInput("sft")}, false)
			r2 := commitGC(t, s, "rollout", "b", nil, true)
			commitGC(t, s, "filter", "b", []Input{r2.AsInput("rollouts")}, true)
			// The current finetune reads filter attempt 1, which reads
			// rollout attempt 1: both stay.
			return future()
		}, nil},
		{"a superseded attempt goes once its reader is rerun", func(t *testing.T, s *Store) time.Time {
			r1 := commitGC(t, s, "rollout", "a", nil, false)
			commitGC(t, s, "filter", "a", []Input{r1.AsInput("rollouts")}, false)
			r2 := commitGC(t, s, "rollout", "b", nil, true)
			commitGC(t, s, "filter", "b", []Input{r2.AsInput("rollouts")}, true)
			return future()
		}, slices.Concat(wholeAttempt("r001-w01-filter", "superseded by attempt 2", true),
			wholeAttempt("r001-w01-rollout", "superseded by attempt 2", true))},
		{"nothing outside the stage folders", func(t *testing.T, s *Store) time.Time {
			ctx := context.Background()
			for _, k := range []string{"runs/run/run.json", "runs/run/ledger/000001.json", "runs/run/lease/0000000001.json",
				"harnesses/abc/harness.star", "models/run/r001-w01/model.bin", "runs/run/stages/notes.txt",
				"runs/run/stages/Not_A_Stage/x.txt", "runs/other/stages/r001-w01-rollout/_INPUTS.json"} {
				if err := s.WriteAll(ctx, k, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			writeShard(t, openGC(t, s, "rollout", "a", nil, false), 0, 1)
			return future()
		}, wholeAttempt("r001-w01-rollout", "uncommitted attempt", false)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *Store) {
				ctx := context.Background()
				cutoff := c.build(t, s)
				current, err := ListCommitted(ctx, s, "run")
				if err != nil {
					t.Fatal(err)
				}
				before := keysUnder(t, s)

				g, err := garbageBefore(ctx, s, "run", cutoff)
				if err != nil {
					t.Fatal(err)
				}
				if got := render(g); !slices.Equal(got, c.want) {
					t.Fatalf("garbage:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
				}
				if after := keysUnder(t, s); !slices.Equal(after, before) {
					t.Fatalf("listing garbage changed the bucket: %q → %q", before, after)
				}

				done, err := DeleteGarbage(ctx, s, g)
				if err != nil {
					t.Fatal(err)
				}
				var bytes int64
				gone := map[string]bool{}
				for _, e := range g {
					bytes += e.Size
					gone[e.Key] = true
				}
				if done.Objects != len(g) || done.Bytes != bytes || len(done.Skipped) != 0 {
					t.Fatalf("deleted %+v, want %d objects, %d bytes", done, len(g), bytes)
				}
				want := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return gone[k] })
				if after := keysUnder(t, s); !slices.Equal(after, want) {
					t.Fatalf("after gc the bucket holds %q, want %q", after, want)
				}
				if g, err := garbageBefore(ctx, s, "run", cutoff); err != nil || len(g) != 0 {
					t.Fatalf("garbage after gc: %q %v", render(g), err)
				}
				now, err := ListCommitted(ctx, s, "run")
				if err != nil || len(now) != len(current) {
					t.Fatalf("committed after gc: %d, %v; before: %d", len(now), err, len(current))
				}
				for i, m := range now {
					if m.Digest != current[i].Digest {
						t.Errorf("%s: manifest %s after gc, %s before", m.Dir, m.Digest, current[i].Digest)
					}
					if err := Verify(ctx, s, m, true); err != nil {
						t.Errorf("after gc: %v", err)
					}
				}
				if s.dir != "" {
					for _, e := range g {
						if _, err := os.Stat(filepath.Join(s.dir, e.Dir)); e.Kind != NotInManifest && !os.IsNotExist(err) {
							t.Errorf("folder %s is still on disk: %v", e.Dir, err)
						}
					}
				}
			})
		})
	}
}

// A crash after a superseded attempt lost its _MANIFEST.json leaves an
// uncommitted folder that readers ignore, and the next collection finishes
// it; the current attempt stays committed and verifies throughout.
func TestGarbageCrashAfterCommitPoint(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		old := commitGC(t, s, "rollout", "a", nil, false)
		cur := commitGC(t, s, "rollout", "b", nil, true)
		intact := func(when string) {
			t.Helper()
			m, err := LatestCommitted(ctx, s, "run", gcPos, "rollout")
			if err != nil || m.Digest != cur.Digest {
				t.Fatalf("%s: latest committed %v, %v; want attempt 2", when, m, err)
			}
			ms, err := ListCommitted(ctx, s, "run")
			if err != nil || len(ms) != 1 || ms[0].Digest != cur.Digest {
				t.Fatalf("%s: ListCommitted = %d, %v", when, len(ms), err)
			}
			if err := Verify(ctx, s, m, true); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		g, err := garbageBefore(ctx, s, "run", future())
		if err != nil || len(g) != 4 || g[0].Key != old.Key {
			t.Fatalf("garbage %q, %v: want attempt 1, its manifest first", render(g), err)
		}
		// The crash: only the first deletion happened.
		done, err := DeleteGarbage(ctx, s, g[:1])
		if err != nil || done.Objects != 1 {
			t.Fatalf("delete the commit point: %+v %v", done, err)
		}
		intact("after the crash")
		if _, err := ReadManifest(ctx, s, old.Dir); !errors.Is(err, ErrNotFound) {
			t.Fatalf("attempt 1 after the crash: %v, want not committed", err)
		}
		// A rerun of the old identity does not resume the half-deleted
		// folder: it is below the latest committed attempt.
		if _, err := OpenAttempt(ctx, s, mustIdentity(t, "run", gcPos, "rollout", "a", 1, 1), AttemptOptions{}); !errors.Is(err, ErrInputsDiffer) {
			t.Fatalf("rerun of attempt 1's identity: %v", err)
		}
		g, err = garbageBefore(ctx, s, "run", future())
		want := wholeAttempt("r001-w01-rollout", "uncommitted attempt", false)
		if err != nil || !slices.Equal(render(g), want) {
			t.Fatalf("garbage after the crash: %q, %v; want %q", render(g), err, want)
		}
		if _, err := DeleteGarbage(ctx, s, g); err != nil {
			t.Fatal(err)
		}
		intact("after the second gc")
		for _, k := range keysUnder(t, s) {
			if strings.HasPrefix(k, old.Dir+"/") {
				t.Errorf("%s left behind", k)
			}
		}
	})
}

// An uncommitted attempt that a try writes to after Garbage listed it is
// left alone, and so is one that got committed meanwhile.
func TestDeleteGarbageSkipsChangedFolders(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a := openGC(t, s, "rollout", "a", nil, false)
		g, err := garbageBefore(ctx, s, "run", future())
		if err != nil || len(g) != 1 {
			t.Fatalf("garbage %q %v: want the _INPUTS.json", render(g), err)
		}
		writeShard(t, a, 0, 2) // a try resumes it
		done, err := DeleteGarbage(ctx, s, g)
		if err != nil || done.Objects != 0 || !slices.Equal(done.Skipped, []string{a.Dir}) {
			t.Fatalf("delete a resumed attempt: %+v %v", done, err)
		}
		g, _ = garbageBefore(ctx, s, "run", future())
		if _, _, err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		done, err = DeleteGarbage(ctx, s, g)
		if err != nil || done.Objects != 0 || len(done.Skipped) != 1 {
			t.Fatalf("delete an attempt committed since: %+v %v", done, err)
		}
		m, err := LatestCommitted(ctx, s, "run", gcPos, "rollout")
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(ctx, s, m, true); err != nil {
			t.Fatal(err)
		}
	})
}

// DeleteGarbage deletes a committed attempt only as Garbage lists it:
// manifest included, and superseded by a committed attempt.
func TestDeleteGarbageRefusals(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	m := commitGC(t, s, "rollout", "a", nil, false)
	var objects []Entry
	if err := s.List(ctx, m.Dir+"/", false, func(e Entry) error { objects = append(objects, e); return nil }); err != nil {
		t.Fatal(err)
	}
	g := wholeFolder(&folderScan{folder: m.Folder(), dir: m.Dir, objects: objects}, Superseded, 2)
	cases := []struct {
		name string
		g    []GarbageEntry
		want string
	}{
		{"not superseded by a committed attempt", g, "attempt 2, said to supersede it, is not committed"},
		{"without its manifest", g[1:], "comes with its _MANIFEST.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done, err := DeleteGarbage(ctx, s, c.g)
			if err == nil || !strings.Contains(err.Error(), c.want) || done.Objects != 0 {
				t.Fatalf("DeleteGarbage = %+v, %v; want an error saying %q", done, err, c.want)
			}
			if err := Verify(ctx, s, m, true); err != nil {
				t.Fatal(err)
			}
			if _, err := LatestCommitted(ctx, s, "run", gcPos, "rollout"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
