package storagetest

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/whalerun/whale/storage"
)

func testCreateExclusive(t *testing.T, _ Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	key := "excl/lease.json"
	if err := s.CreateExclusive(ctx, key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := s.CreateExclusive(ctx, key, []byte("second"))
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	var se *storage.Error
	if !errors.As(err, &se) || se.Op != "create" || se.Key != key {
		t.Fatalf("second create: %#v, want a *storage.Error for op create", err)
	}
	if storage.Transient(err) {
		t.Fatal("ErrExists classified transient")
	}
	noSecrets(t, err.Error())
	if got, err := s.ReadAll(ctx, key); err != nil || string(got) != "first" {
		t.Fatalf("content %q, %v; want first", got, err)
	}
	// A deleted key can be created again.
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateExclusive(ctx, key, []byte("third")); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	// Under an existing folder and in a new one.
	for _, k := range []string{"excl/sub/x", "excl2/deep/er/y"} {
		if err := s.CreateExclusive(ctx, k, []byte(k)); err != nil {
			t.Fatalf("create %s: %v", k, err)
		}
	}
	if es := listAll(t, s, "", false); len(es) != 3 {
		t.Fatalf("list after creates: %q", keysOf(es))
	}
}

func testCreateExclusiveRace(t *testing.T, cfg Config, open func(*testing.T) *storage.Store) {
	s := open(t)
	ctx := ctxT(t)
	wins := make([][]int, cfg.RaceKeys) // racers that won each key
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Racers)
	startGate := make(chan struct{})
	for r := range cfg.Racers {
		wg.Go(func() {
			order := mrand.Perm(cfg.RaceKeys)
			// Half the racers go in one shared order, so that many
			// collide on the same key at the same moment.
			if r%2 == 0 {
				slices.Sort(order)
			}
			<-startGate
			for _, k := range order {
				err := s.CreateExclusive(ctx, fmt.Sprintf("race/k%04d", k), fmt.Appendf(nil, "racer %d key %d", r, k))
				switch {
				case err == nil:
					mu.Lock()
					wins[k] = append(wins[k], r)
					mu.Unlock()
				case errors.Is(err, storage.ErrExists):
				default:
					errc <- fmt.Errorf("racer %d key %d: %w", r, k, err)
					return
				}
			}
		})
	}
	close(startGate)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	bad := 0
	for k, w := range wins {
		if len(w) != 1 {
			bad++
			if bad <= 5 {
				t.Errorf("key %d: %d winners %v, want exactly 1", k, len(w), w)
			}
			continue
		}
		got, err := s.ReadAll(ctx, fmt.Sprintf("race/k%04d", k))
		if want := fmt.Sprintf("racer %d key %d", w[0], k); err != nil || string(got) != want {
			t.Errorf("key %d: content %q, %v; want the winner's %q", k, got, err, want)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys had other than one winner", bad, cfg.RaceKeys)
	}
	if es := listAll(t, s, "race/", false); len(es) != cfg.RaceKeys {
		t.Fatalf("listed %d race keys, want %d", len(es), cfg.RaceKeys)
	}
}
