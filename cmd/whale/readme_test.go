package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/scheduler/slurm"
)

const readme = "../../README.md"

// readmeCommands returns the command forms of the README's command table
// (the code block under "## Commands"): each line that starts with
// "whale ", up to the two spaces before its description.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Commands\n")
	if !ok {
		t.Fatalf("%s has no section \"## Commands\"", readme)
	}
	parts := strings.SplitN(section, "```", 3)
	if len(parts) < 3 {
		t.Fatalf("the Commands section of %s has no code block", readme)
	}
	var forms []string
	for _, line := range strings.Split(parts[1], "\n") {
		if !strings.HasPrefix(line, "whale ") {
			continue
		}
		if i := strings.Index(line, "  "); i >= 0 {
			line = line[:i]
		}
		forms = append(forms, strings.TrimSpace(line))
	}
	if len(forms) == 0 {
		t.Fatalf("no commands in the Commands section of %s", readme)
	}
	return forms
}

var commandWord = regexp.MustCompile(`^[a-z]+$`)

// fillForm turns a README command form into a command line, in the form's
// own order: its command words, then every token of it, optional ones
// ([--force]) included, with each placeholder (RUN, FILE|h0, RUN...,
// "...") replaced by the next of values. extra goes at the end.
func fillForm(t *testing.T, form string, values, extra []string) []string {
	t.Helper()
	tokens := strings.Fields(form)[1:] // after "whale"
	var args []string
	words := true
	for _, tok := range tokens {
		tok = strings.Trim(tok, "[]")
		switch {
		case strings.HasPrefix(tok, "-"):
			words = false
			args = append(args, tok)
		case words && commandWord.MatchString(tok):
			args = append(args, tok)
		default:
			words = false
			if len(values) == 0 {
				t.Fatalf("%q: no value for placeholder %q", form, tok)
			}
			args = append(args, values[0])
			values = values[1:]
		}
	}
	if len(values) > 0 {
		t.Fatalf("%q: values %q left over", form, values)
	}
	return append(args, extra...)
}

// flagParseErrors are what urfave/cli and Go's flag package say when a
// command line's flags do not parse.
var flagParseErrors = []string{
	"Required flag", "flag provided but not defined", "flag needs an argument", "invalid value", "bad flag syntax",
}

// Every command of the README's command table, typed as the README writes
// it (positional arguments first, then flags), gets past flag parsing:
// Required flags after the arguments count, and the values reach the
// command. Where running the command for real is cheap it succeeds; where
// not, it fails afterwards for a reason that names what the flags said (a
// missing run in the --root given, an unknown --task).
func TestREADMECommands(t *testing.T) {
	t.Setenv("WHALE_ROOT", "")
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	// The example's datasets, for plan and submit: disjoint, as init
	// requires.
	whale(t, "data", "import", "--root", root, "--name", "lichess", puzzlesCSV).mustCode(t, exitOK, "datasets/lichess")
	whale(t, "data", "split", "--root", root, "lichess", "--train", "3", "--search", "1", "--test", "1").
		mustCode(t, exitOK, "datasets/lichess-train", "datasets/lichess-search", "datasets/lichess-test")
	emptyHarness := writeFile(t, "empty.star", "")
	reportDir := filepath.Join(dir, "report")
	checkpoint := filepath.Join(dir, "m.wlm")

	old := newScheduler
	newScheduler = func() slurm.Scheduler { return slurm.NewFake() }
	t.Cleanup(func() { newScheduler = old })

	noRun := []string{`no run "nosuch" in ` + root}
	// In the README's order: init makes the run the later commands read.
	cases := []struct {
		form   string   // as in the README
		values []string // for the form's placeholders, in order
		extra  []string // flags the form leaves out (--root where it is implied)
		code   int
		wants  []string // on stdout when the code is 0, else in the error
	}{
		{"whale init EXPERIMENT.yaml --root URL", []string{exampleExperiment, root}, nil,
			exitOK, []string{"initialized run chess-whale at " + root}},
		{"whale status RUN --root URL", []string{"chess-whale", root}, nil,
			exitOK, []string{"chess-whale", "lease"}},
		{"whale ls [RUN] --root URL", []string{"chess-whale", root}, nil,
			exitOK, []string{"(no committed stages yet)"}},
		{"whale ls RUN --files [--stage S] [--table T] [--format list|json|duckdb]", []string{"chess-whale", "rollout", "rollouts", "json"}, []string{"--root", root},
			exitOK, []string{"[]"}},
		{"whale show STAGE-OR-FILE [--rows N]", []string{"datasets/lichess-train", "1"}, []string{"--root", root},
			exitOK, []string{"table tasks", "... 2 more rows"}},
		{"whale data import FILE --name N --root URL", []string{puzzlesCSV, "my-puzzles", root}, nil,
			exitOK, []string{"datasets/my-puzzles"}},
		{"whale data split DATASET --train N --search N --test N --seed S --root URL", []string{"my-puzzles", "2", "1", "1", "7", root}, nil,
			exitOK, []string{"split 5 tasks of dataset my-puzzles (seed 7)", "datasets/my-puzzles-search", "1 tasks in none"}},
		{"whale index build CORPUS --name N --root URL", []string{searchCorpus, "wiki", root}, nil,
			exitOK, []string{"indexed 61 passages", "indexes/wiki"}},
		{"whale index serve --name N --root URL [--addr 127.0.0.1:8000]", []string{"nosuch", root, "127.0.0.1:0"}, []string{"--cache", filepath.Join(dir, "cache")},
			exitUsage, []string{`no index "nosuch" in ` + root}},
		{"whale harness doc DOMAIN", []string{"chess"}, nil,
			exitOK, []string{"# Harness contract: chess"}},
		{"whale harness check FILE --domain D", []string{emptyHarness, "chess"}, nil,
			exitOK, []string{"harness  " + emptyHarness, "domain   chess"}},
		{"whale harness run FILE|h0 --domain D --tasks T --task ID --endpoint URL --model M",
			[]string{"h0", "chess", puzzlesCSV, "nosuch", "http://127.0.0.1:9/v1", "m"}, nil,
			exitUsage, []string{`no task "nosuch" among the 5 tasks of ` + puzzlesCSV}},
		{"whale plan RUN", []string{"chess-whale"}, []string{"--root", root},
			exitOK, []string{"next: rollout at r001-w01"}},
		{"whale step RUN", []string{"nosuch"}, []string{"--root", root}, exitUsage, noRun},
		{"whale run RUN [--wait]", []string{"nosuch"}, []string{"--root", root}, exitUsage, noRun},
		{"whale stage NAME RUN --at POS [--force]", []string{"rollout", "nosuch", "r001-w01"}, []string{"--root", root}, exitUsage, noRun},
		{"whale gc RUN --root URL [--older-than DURATION] [--dry-run]", []string{"chess-whale", root, "1h"}, nil,
			exitOK, []string{"no garbage older than 1h0m0s in run chess-whale"}},
		{"whale submit slurm RUN [--chain K] [--dry-run] [--partition ... --gpus ...]", []string{"chess-whale", "2", "gpu", "1"}, []string{"--root", root},
			exitOK, []string{"#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "--chain 2"}},
		{"whale analyze RUN...|FILE.parquet... [--by COLS] [--format table|csv|json]", []string{"chess-whale", "run", "json"}, []string{"--root", root},
			exitOK, []string{`"by":["run"]`, "run chess-whale has no committed stage with rollouts yet"}},
		{"whale report RUN... [--out DIR]", []string{"chess-whale", reportDir}, []string{"--root", root},
			exitOK, []string{filepath.Join(reportDir, "index.html")}},
		// A negative budget is refused before the demo starts.
		{"whale demo [--dir DIR] [--world W] [--quick] [--budget N] [--seeds N] [--all-schedules]", []string{filepath.Join(dir, "demo"), "arithmetic", "-1", "2"}, nil,
			exitUsage, []string{"--budget -1"}},
		{"whale local serve --checkpoint FILE", []string{filepath.Join(dir, "missing.wlm")}, nil,
			exitUsage, []string{"--checkpoint " + filepath.Join(dir, "missing.wlm")}},
		{"whale local pretrain --out FILE [--world W]", []string{checkpoint, "search"}, []string{"--steps", "1", "--batch", "2"},
			exitOK, []string{"wrote " + checkpoint + " (step 1"}},
		{"whale version", nil, nil, exitOK, []string{"whale "}},
	}

	forms := readmeCommands(t)
	var covered []string
	for _, c := range cases {
		covered = append(covered, c.form)
		if !slices.Contains(forms, c.form) {
			t.Errorf("case %q is not a command of the README's table", c.form)
			continue
		}
		t.Run(c.form, func(t *testing.T) {
			args := fillForm(t, c.form, c.values, c.extra)
			r := whale(t, args...)
			if r.err != nil {
				for _, bad := range flagParseErrors {
					if strings.Contains(r.err.Error(), bad) {
						t.Fatalf("whale %q: flags did not parse: %v", args, r.err)
					}
				}
			}
			r.mustCode(t, c.code, c.wants...)
		})
	}
	for _, f := range forms {
		if !slices.Contains(covered, f) {
			t.Errorf("README command %q has no case here", f)
		}
	}
}
