package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/models/local"
)

func TestLocalPretrain(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		app := &cli.App{Name: "whale", Writer: &out, ErrWriter: &out, Commands: []*cli.Command{localPretrainCommand()}}
		err := app.RunContext(context.Background(), append([]string{"whale", "pretrain"}, args...))
		return out.String(), err
	}
	ckpt := filepath.Join(dir, "m.wlm")
	out, err := run("--out", ckpt, "--steps", "2", "--batch", "4", "--tasks-out", filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatalf("pretrain: %v\n%s", err, out)
	}
	m, err := local.Load(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if m.Step() != 2 || !strings.Contains(out, m.Digest()) {
		t.Errorf("checkpoint at step %d, output %q does not name digest %s", m.Step(), out, m.Digest())
	}
	for _, split := range []string{"train", "search", "test"} {
		if _, err := os.Stat(filepath.Join(dir, "tasks", "demo-"+split+".jsonl")); err != nil {
			t.Error(err)
		}
	}
	for _, args := range [][]string{{}, {"--out", ckpt, "extra"}, {"--out", ckpt, "--procs", "0"}} {
		if _, err := run(args...); err == nil {
			t.Errorf("pretrain %q did not fail", args)
		}
	}
}
