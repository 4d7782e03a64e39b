package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeNamesEveryFile: jobs/README.md explains the files under jobs/:
// it names each example, each Slurm template, each file at the top and
// each folder (trainers/ and the others explain their own files in their
// README).
func TestReadmeNamesEveryFile(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	var names []string
	top, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		if e.IsDir() {
			names = append(names, e.Name()+"/")
		} else if e.Name() != "README.md" {
			names = append(names, e.Name())
		}
	}
	for _, dir := range []string{"examples", "slurm"} {
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if filepath.Base(f) != "README.md" {
				names = append(names, filepath.Base(f))
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d files found under jobs/: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(readme, "`"+n+"`") && !strings.Contains(readme, "## "+n) {
			t.Errorf("jobs/README.md does not name %s", n)
		}
	}
}
