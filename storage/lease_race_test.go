package storage_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
	"github.com/whalerun/whale/storage/storagetest"
)

const (
	raceProcs  = 8
	raceRounds = 20
	// raceGap separates rounds; a round's contest takes a few requests.
	raceGap = 150 * time.Millisecond
)

// TestLeaseRace: 8 processes (this test binary, re-run as
// TestLeaseRaceChild) start each round at the same instant and try to take
// one lease; exactly one wins every round. Even rounds start from an empty
// folder, odd ones from an expired lease at generation 3, so that both the
// first acquisition and the takeover are raced.
func TestLeaseRace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 child processes for a few seconds per backend; CI runs it without -short")
	}
	backends := []struct {
		name string
		root func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + t.TempDir() }},
		{"s3", func(t *testing.T) string { return s3test.NewBucketURL(t) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			root := withPrefix(b.root(t), "race-"+storagetest.RandomHex(4))
			raceLease(t, root)
		})
	}
}

func withPrefix(root, prefix string) string {
	sep := "?"
	if strings.Contains(root, "?") {
		sep = "&"
	}
	return root + sep + "prefix=" + prefix
}

func raceLease(t *testing.T, root string) {
	ctx := context.Background()
	s, err := storage.Open(ctx, root, &storage.Options{Retry: &fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Odd rounds: an expired lease of a crashed holder.
	for r := 1; r < raceRounds; r += 2 {
		for g := int64(1); g <= 3; g++ {
			old := storage.LeaseRecord{Generation: g, Holder: "crashed", Host: "gone", PID: 1, Token: "dead",
				Acquired: time.Now().Add(-time.Hour), Expires: time.Now().Add(-time.Minute)}
			data, _ := json.Marshal(old)
			if err := s.CreateExclusive(ctx, fmt.Sprintf("round-%02d/%010d.json", r, g), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now().Add(1500 * time.Millisecond) // time for the children to start
	barrier := t.TempDir()
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	children := make([]*child, raceProcs)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestLeaseRaceChild$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(),
			"WHALE_LEASE_CHILD=1",
			"WHALE_LEASE_ROOT="+root,
			"WHALE_LEASE_ID="+strconv.Itoa(i),
			"WHALE_LEASE_ROUNDS="+strconv.Itoa(raceRounds),
			"WHALE_LEASE_START="+strconv.FormatInt(start.UnixNano(), 10),
			"WHALE_LEASE_GAP="+raceGap.String(),
			"WHALE_LEASE_PROCS="+strconv.Itoa(raceProcs),
			"WHALE_LEASE_BARRIER="+barrier,
		)
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	wins := make([][]int, raceRounds)
	loses := make([]int, raceRounds)
	late := 0
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, c.out.String())
		}
		seen := 0
		sc := bufio.NewScanner(bytes.NewReader(c.out.Bytes()))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "ROUND" {
				continue
			}
			r, _ := strconv.Atoi(f[1])
			seen++
			switch f[2] {
			case "WIN":
				wins[r] = append(wins[r], i)
			case "LOSE":
				loses[r]++
			default:
				t.Errorf("child %d: %s", i, sc.Text())
			}
			if len(f) > 3 && f[3] == "late" {
				late++
			}
		}
		if seen != raceRounds {
			t.Fatalf("child %d reported %d rounds, want %d:\n%s", i, seen, raceRounds, c.out.String())
		}
	}
	for r := range raceRounds {
		if len(wins[r]) != 1 || loses[r] != raceProcs-1 {
			t.Errorf("round %d: winners %v, %d losers; want exactly 1 winner", r, wins[r], loses[r])
			continue
		}
		folder := fmt.Sprintf("round-%02d", r)
		rec, ok, err := storage.ReadLease(ctx, s, folder)
		wantGen := int64(1)
		if r%2 == 1 {
			wantGen = 4
		}
		if err != nil || !ok || rec.Holder != fmt.Sprint("child-", wins[r][0]) || rec.Generation != wantGen {
			t.Errorf("round %d: stored lease %+v (%v), want generation %d held by child-%d", r, rec, err, wantGen, wins[r][0])
		}
	}
	t.Logf("%d rounds × %d processes; %d attempts started late", raceRounds, raceProcs, late)
}

// TestLeaseRaceChild is one contender of TestLeaseRace; run on its own it
// does nothing.
func TestLeaseRaceChild(t *testing.T) {
	if os.Getenv("WHALE_LEASE_CHILD") != "1" {
		return
	}
	id := os.Getenv("WHALE_LEASE_ID")
	rounds, _ := strconv.Atoi(os.Getenv("WHALE_LEASE_ROUNDS"))
	startNs, _ := strconv.ParseInt(os.Getenv("WHALE_LEASE_START"), 10, 64)
	gap, _ := time.ParseDuration(os.Getenv("WHALE_LEASE_GAP"))
	ctx := context.Background()
	s, err := storage.Open(ctx, os.Getenv("WHALE_LEASE_ROOT"), &storage.Options{Retry: &fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for r := range rounds {
		at := time.Unix(0, startNs).Add(time.Duration(r) * gap)
		late := ""
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		} else if d < -gap/2 {
			late = " late"
		}
		_, err := storage.AcquireLease(ctx, s, fmt.Sprintf("round-%02d", r), storage.LeaseOptions{Holder: "child-" + id, TTL: time.Minute})
		switch {
		case err == nil:
			fmt.Printf("ROUND %d WIN%s\n", r, late)
		case errors.Is(err, storage.ErrLeaseHeld):
			fmt.Printf("ROUND %d LOSE%s\n", r, late)
		default:
			fmt.Printf("ROUND %d ERROR %q\n", r, err.Error())
		}
	}
	// A holder that has exited is taken over at once by a contender on
	// the same host: stay until every child has played every round.
	barrier := os.Getenv("WHALE_LEASE_BARRIER")
	procs, _ := strconv.Atoi(os.Getenv("WHALE_LEASE_PROCS"))
	if err := os.WriteFile(filepath.Join(barrier, "done-"+id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if done, _ := filepath.Glob(filepath.Join(barrier, "done-*")); len(done) >= procs {
			return
		}
	}
	t.Fatal("the other children did not finish their rounds within a minute")
}
