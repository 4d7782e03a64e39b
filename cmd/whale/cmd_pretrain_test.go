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
	for _, w := range []struct {
		world, prefix string
		files         []string
		context       int
	}{
		{"arithmetic", "demo", []string{"train", "search", "test"}, 256},
		{"search", "searchdemo", []string{"train", "search", "test", "corpus"}, 512},
	} {
		tasks := filepath.Join(dir, w.world)
		out, err := run("--world", w.world, "--out", ckpt, "--steps", "2", "--batch", "4", "--tasks-out", tasks)
		if err != nil {
			t.Fatalf("pretrain: %v\n%s", err, out)
		}
		m, err := local.Load(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		if m.Step() != 2 || !strings.Contains(out, m.Digest()) || m.Config().Context != w.context {
			t.Errorf("%s: checkpoint at step %d, context %d, output %q does not name digest %s", w.world, m.Step(), m.Config().Context, out, m.Digest())
		}
		for _, f := range w.files {
			if _, err := os.Stat(filepath.Join(tasks, w.prefix+"-"+f+".jsonl")); err != nil {
				t.Error(err)
			}
		}
	}
	for _, args := range [][]string{{}, {"--out", ckpt, "extra"}, {"--out", ckpt, "--procs", "0"}, {"--out", ckpt, "--world", "nope"}} {
		if _, err := run(args...); err == nil {
			t.Errorf("pretrain %q did not fail", args)
		}
	}
}
