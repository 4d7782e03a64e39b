package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/pipeline/spec"
)

// freezeOld writes run.json for src as a whale that resolved no paths
// and had none of today's checks froze it: the spec as written,
// normalized, no inputs, no directory.
func freezeOld(t *testing.T, root, src string) []byte {
	t.Helper()
	d, err := spec.Read(writeFile(t, "old.yaml", src))
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.Parse("old.yaml", []byte(src))
	if err != nil {
		// Today's checks refuse it: take the spec as decoded.
		e = d.Exp
	}
	digest, err := spec.Digest(e)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := (&spec.Run{Spec: *e, SpecDigest: digest, WhaleVersion: "v0.old", Created: time.Unix(0, 0).UTC()}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := openStore(t, root).WriteAll(context.Background(), runKey(e.Name), raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// A run frozen by an older whale, which kept relative paths and read them
// from the working directory, from a directory other than its file's:
// init again from there is nothing to do, with the file as it was or
// rewritten to name the same checkpoint relatively to the file or
// absolutely. A new run of the file as it was is still refused, and the
// old run from another directory is another checkpoint.
func TestInitLegacyFromWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	ckpt := filepath.Join(dir, "pretrained.wlm")
	if err := os.WriteFile(ckpt, demo.PretrainedCheckpoint(), 0o644); err != nil {
		t.Fatal(err)
	}
	expDir := filepath.Join(dir, "experiments")
	if err := os.MkdirAll(expDir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := smallLocal("legacy", "pretrained.wlm")
	raw := freezeOld(t, root, src)
	write := func(name, ckpt string) string {
		p := filepath.Join(expDir, name)
		if err := os.WriteFile(p, []byte(smallLocal("legacy", ckpt)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Chdir(dir)
	for _, file := range []string{write("legacy.yaml", "pretrained.wlm"), write("up.yaml", "../pretrained.wlm"), write("abs.yaml", ckpt)} {
		whale(t, "init", "--root", root, file).mustCode(t, exitOK, "nothing to do",
			`keeps model.checkpoint as the relative path "pretrained.wlm"`, "start its runs from "+dir)
	}
	if again, _ := openStore(t, root).ReadAll(context.Background(), runKey("legacy")); !bytes.Equal(again, raw) {
		t.Error("run.json was rewritten")
	}
	// A new run must name the checkpoint relatively to its file.
	whale(t, "init", "--root", root, "--name", "legacy-2", filepath.Join(expDir, "legacy.yaml")).mustCode(t, exitUsage,
		"model.checkpoint", "in the working directory "+dir)
	whale(t, "init", "--root", root, "--name", "legacy-3", filepath.Join(expDir, "up.yaml")).mustCode(t, exitOK, "initialized run legacy-3")
	// From elsewhere the old run's path is not this checkpoint.
	t.Chdir(t.TempDir())
	whale(t, "init", "--root", root, filepath.Join(expDir, "up.yaml")).mustCode(t, exitConflict, "model.checkpoint")
}

// A run frozen before a check existed (a bound, the secret scan) inits
// again from its own file, with today's problems as warnings; a new run
// of the same spec is refused, and so is the old run's file changed
// elsewhere.
func TestInitOldRunFailingNewChecks(t *testing.T) {
	const secret = "sk-or-v1-0123456789abcdef"
	for _, tc := range []struct{ name, extra, field string }{
		{"a bound", "rollout: {shards: 20000}\n", "rollout.shards"},
		{"the secret scan", "slurm: {default: {prologue: ['export OPENROUTER_KEY=" + secret + "']}}\n", "slurm.default.prologue[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := "file://" + filepath.Join(dir, "bucket")
			ckpt := filepath.Join(dir, "pretrained.wlm")
			if err := os.WriteFile(ckpt, demo.PretrainedCheckpoint(), 0o644); err != nil {
				t.Fatal(err)
			}
			src := smallLocal("old", ckpt) + tc.extra
			raw := freezeOld(t, root, src)
			file := writeFile(t, "old.yaml", src)

			r := whale(t, "init", "--root", root, file)
			r.mustCode(t, exitOK, "nothing to do", "warning: "+file+":", "field "+tc.field,
				"frozen by whale v0.old", "refuses a new run with this spec")
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the secret is in the output:\n%s", r.stdout)
			}
			if again, _ := openStore(t, root).ReadAll(context.Background(), runKey("old")); !bytes.Equal(again, raw) {
				t.Error("run.json was rewritten")
			}
			whale(t, "init", "--root", root, "--name", "old-2", file).mustCode(t, exitUsage, "field "+tc.field)
			// A changed file that still fails the check is bad input.
			changed := writeFile(t, "changed.yaml", src+"seed: 9\n")
			whale(t, "init", "--root", root, changed).mustCode(t, exitUsage, "field "+tc.field)
			// Nothing of the refused runs was written.
			for _, name := range []string{"old-2"} {
				if ok, _ := openStore(t, root).Exists(context.Background(), runKey(name)); ok {
					t.Errorf("run %s was created", name)
				}
			}
		})
	}
	// A root that does not exist is not created for a refused spec.
	dir := t.TempDir()
	bad := writeFile(t, "bad.yaml", smallLocal("new", "/models/none.wlm")+"rollout: {shards: 20000}\n")
	whale(t, "init", "--root", "file://"+filepath.Join(dir, "bucket"), bad).mustCode(t, exitUsage, "rollout.shards")
	if _, err := os.Stat(filepath.Join(dir, "bucket")); !os.IsNotExist(err) {
		t.Errorf("the root was created (%v)", err)
	}
}
