package main

import (
	"testing"
)

// Flag parsing and exit codes: bad flags and arguments, and a Required flag
// left out, are usage errors (2), as `whale --help` documents, and flags may
// come before, between or after the positional arguments.
func TestCommandLine(t *testing.T) {
	root := "file://" + t.TempDir()
	whale(t, "data", "import", "--root", root, puzzlesCSV).mustCode(t, exitOK, "datasets/puzzles")

	cases := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"version", []string{"version"}, exitOK, []string{"whale ", "go1."}},
		{"help", []string{"--help"}, exitOK, []string{"EXIT CODES", "WHALE_ROOT"}},
		{"no command", nil, exitOK, []string{"USAGE"}},
		{"command help after args", []string{"init", "x.yaml", "--help"}, exitOK, []string{"whale init", "EXPERIMENT.yaml"}},
		{"command help before args", []string{"init", "-h", "x.yaml"}, exitOK, []string{"whale init", "EXPERIMENT.yaml"}},
		{"help of a command with a required flag", []string{"stage", "rollout", "r", "--help"}, exitOK, []string{"whale stage", "--at POSITION"}},
		{"subcommand help", []string{"data", "import", "-h"}, exitOK, []string{"whale data import", "--format"}},
		{"group without subcommand", []string{"data"}, exitOK, []string{"import"}},

		{"unknown command", []string{"nosuch"}, exitUsage, []string{`"nosuch"`, "whale --help"}},
		{"unknown subcommand", []string{"data", "nosuch"}, exitUsage, []string{`"nosuch"`, "whale data --help"}},
		{"unknown global flag", []string{"--bogus", "ls"}, exitUsage, []string{"bogus"}},
		{"bad log level", []string{"--log-level", "loud", "version"}, exitUsage, []string{"--log-level"}},
		{"unknown flag before args", []string{"init", "--bogus", "x.yaml"}, exitUsage, []string{"bogus", "whale init --help"}},
		{"unknown flag after args", []string{"init", "x.yaml", "--bogus"}, exitUsage, []string{"-bogus", "whale init --help"}},
		{"flag without its value", []string{"show", "--root", root, "datasets/puzzles", "--rows"}, exitUsage, []string{"-rows", "needs an argument"}},
		{"bad int before args", []string{"show", "--rows", "many", "datasets/puzzles"}, exitUsage, []string{"many", "rows"}},
		{"bad int after args", []string{"show", "datasets/puzzles", "--rows=many"}, exitUsage, []string{"many", "-rows"}},
		{"init without file", []string{"init"}, exitUsage, []string{"one experiment file"}},
		{"init with two files", []string{"init", "a.yaml", "b.yaml"}, exitUsage, []string{"one experiment file", "2"}},
		{"import without file", []string{"data", "import"}, exitUsage, []string{"one file"}},
		{"ls with two runs", []string{"ls", "a", "b"}, exitUsage, []string{"at most one"}},
		{"status without run", []string{"status"}, exitUsage, []string{"one run"}},
		{"show without target", []string{"show"}, exitUsage, []string{"one stage"}},
		{"version with args", []string{"version", "x"}, exitUsage, []string{"no arguments"}},
		{"required flag missing", []string{"stage", "rollout", "r", "--root", root}, exitUsage, []string{`Required flag "at" not set`}},
		{"required flag without its value", []string{"stage", "rollout", "r", "--at"}, exitUsage, []string{"-at", "needs an argument"}},

		// Flags after the positional argument, in every spelling.
		{"flags after args", []string{"show", "datasets/puzzles", "--root", root, "-n", "1", "--width=8", "-c", "id"}, exitOK,
			[]string{"table tasks", csvIDs(t, puzzlesCSV)[0], "... 4 more rows"}},
		{"bool flag after args", []string{"show", "datasets/puzzles", "--root=" + root, "--json"}, exitOK, []string{`"format": "whale.manifest/v1"`}},
		{"double dash", []string{"ls", "--root", root, "--"}, exitOK, []string{"datasets/puzzles"}},
		// Flags between the positional arguments, a required one among them;
		// a value that looks like a flag stays the flag's value.
		{"flags between args", []string{"stage", "rollout", "--at", "r001-w01", "nosuch", "--root", root, "--force"}, exitUsage,
			[]string{`no run "nosuch"`, root}},
		{"bool and value flags after args reach the command", []string{"stage", "rollout", "nosuch", "--at", "r001-w01", "--shard", "1/2", "--force"}, exitUsage,
			[]string{"--shard goes with neither --force nor --finalize"}},
		{"flag value like a flag", []string{"demo", "--budget", "-1"}, exitUsage, []string{"--budget -1"}},
		{"required flag of a command without arguments", []string{"local", "serve", "--root", "", "--checkpoint", "/nonexistent/m.wlm"}, exitUsage,
			[]string{"--checkpoint /nonexistent/m.wlm"}},
		{"global flag before the command, flags after args", []string{"--log-level", "error", "show", "datasets/puzzles", "--root", root, "-n", "1"}, exitOK,
			[]string{"... 4 more rows"}},
		// After "--" that follows an argument nothing is a flag.
		{"flag-like arg after double dash", []string{"show", "--root", root, "datasets/puzzles", "--", "--json"}, exitUsage, []string{"one stage", "2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := whale(t, c.args...)
			r.mustCode(t, c.code, c.wants...)
		})
	}
}
