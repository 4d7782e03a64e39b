package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Inputs that were accepted, hung or cost without bound: each is a usage
// error (exit code 2) that names the field or the line and says what is
// allowed, and none writes anything.
func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	if err := os.MkdirAll(filepath.Join(dir, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	exp := func(name, old, new string) string {
		p, _ := experimentVariant(t, name, old, new)
		return p
	}
	deep := writeFile(t, "deep.yaml", "name: deep\nx: "+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+"\n")
	missingRoot := filepath.Join(dir, "typo", "bucket")

	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"rsft.group_size 1e9", []string{"init", "--root", root, exp("group.yaml", "group_size: 8", "group_size: 1e9")},
			[]string{"group.yaml:", "field rsft.group_size: must be at most 1024, got 1000000000 (allowed 1 to 1024)"}},
		{"eval.k 2^63-1", []string{"init", "--root", root, exp("k.yaml", "k: 8", "k: 9223372036854775807")},
			[]string{"k.yaml:", "field eval.k: must be at most 1024, got 9223372036854775807"}},
		{"harness.samples_per_candidate", []string{"init", "--root", root, exp("samples.yaml", "search_set_size: 256", "search_set_size: 256\n  samples_per_candidate: 100000")},
			[]string{"field harness.samples_per_candidate: must be at most 1024"}},
		{"model.concurrency", []string{"init", "--root", root, exp("conc.yaml", "concurrency: 64", "concurrency: 10000000")},
			[]string{"field model.concurrency: must be at most 4096"}},
		{"a 23-digit seed", []string{"init", "--root", root, exp("seed.yaml", "seed: 1", "seed: 12345678901234567890123")},
			[]string{"seed.yaml:", "field seed: 12345678901234567890123 is out of range for a 64-bit integer: allowed -9223372036854775808 to 9223372036854775807"}},
		{"20k nesting levels", []string{"init", "--root", root, deep},
			[]string{"deep.yaml:2:", "nests deeper than 64 levels"}},
		{"an unknown domain in the data", []string{"data", "import", "--root", root,
			writeFile(t, "dom.jsonl", `{"question": "q", "answer": "1", "domain": "math"}`+"\n"+`{"question": "q", "answer": "1", "domain": "nosuchdomain"}`+"\n")},
			[]string{"dom.jsonl:2:", `field "domain": unknown domain "nosuchdomain": the known domains are chess, demo, math, searchqa`}},
		{"an unknown --domain", []string{"data", "import", "--root", root, "--domain", "nosuchdomain", writeFile(t, "nodom.jsonl", `{"question": "q", "answer": "1"}`+"\n")},
			[]string{"--domain", `unknown domain "nosuchdomain"`, "chess, demo, math, searchqa"}},
		{"invalid UTF-8 in a question", []string{"data", "import", "--root", root, "--domain", "math",
			writeFile(t, "latin1.jsonl", "{\"question\": \"ok\", \"answer\": \"1\"}\n{\"question\": \"caf\xe9?\", \"answer\": \"1\"}\n")},
			[]string{"latin1.jsonl:2:18: invalid UTF-8: byte 0xe9 at byte offset 17 of the line", "(nothing was written)"}},
		{"/dev/zero as JSONL", []string{"data", "import", "--root", root, "--format", "jsonl", "--domain", "math", "/dev/zero"},
			[]string{"/dev/zero:1: line is longer than 8388608 bytes"}},
		{"/dev/zero as CSV", []string{"data", "import", "--root", root, "--format", "lichess", "/dev/zero"},
			[]string{"/dev/zero:1: line is longer than 8388608 bytes"}},
		{"a 10 MB line", []string{"data", "import", "--root", root, "--domain", "math",
			writeFile(t, "long.jsonl", `{"question": "q", "answer": "1"}`+"\n"+`{"question": "`+strings.Repeat("x", 10<<20)+`", "answer": "1"}`+"\n")},
			[]string{"long.jsonl:2: line is longer than 8388608 bytes", "(nothing was written)"}},
		{"ls on a mistyped root", []string{"ls", "--root", "file://" + missingRoot},
			[]string{"no such directory " + missingRoot, "the root does not exist", "whale init"}},
		{"status on a mistyped root", []string{"status", "--root", "file://" + missingRoot, "r"},
			[]string{"no such directory " + missingRoot}},
		{"a prefix out of the root", []string{"ls", "--root", root + "?prefix=../../etc"},
			[]string{`prefix "../../etc" has a .. segment`}},
		{"a prefix out of an s3 bucket", []string{"ls", "--root", "s3://b/../etc?endpoint=http://127.0.0.1:1&region=us-east-1"},
			[]string{`prefix "../etc" has a .. segment`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			whale(t, tt.args...).mustCode(t, exitUsage, tt.wants...)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			if _, err := os.Stat(filepath.Join(dir, "typo")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists (%v): a reading command created the root", filepath.Join(dir, "typo"), err)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, "bucket")); len(entries) != 0 {
				t.Errorf("the bucket holds %v", entries)
			}
		})
	}

	// Only init and data import create a root.
	fresh := filepath.Join(dir, "fresh")
	whale(t, "data", "import", "--root", "file://"+fresh, "--domain", "math", writeFile(t, "ok.jsonl", `{"question": "q", "answer": "1"}`+"\n")).mustCode(t, exitOK)
	whale(t, "ls", "--root", "file://"+fresh).mustCode(t, exitOK, "ok")
}
