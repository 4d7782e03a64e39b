package propose

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent that fills prototype/requests with files costs the stage a
// bounded memory of names and a few log lines, however many it makes.
func TestPrototypeRequestFlood(t *testing.T) {
	dir := t.TempDir()
	reqs, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reqs.Close()
	var logs bytes.Buffer
	p := &prototyper{reqs: reqs, log: slog.New(slog.NewTextHandler(&logs, nil)), seen: map[string]bool{}}
	// The agent makes names between polls, as fast as it can.
	for round := range 10 {
		for i := range 1000 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d-%04d", round, i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p.poll(context.Background())
	}
	if len(p.seen) > prototypeSeen+1 {
		t.Errorf("%d names remembered, want at most %d", len(p.seen), prototypeSeen+1)
	}
	if n := strings.Count(logs.String(), "\n"); n > 11 || n == 0 {
		t.Errorf("%d log lines:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "no further ones are looked at") {
		t.Errorf("the limit is not said:\n%s", logs.String())
	}
}
