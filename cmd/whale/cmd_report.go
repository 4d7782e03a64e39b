package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/report"
	"github.com/whalerun/whale/storage"
)

// ---- report

type reportOptions struct {
	Root string
	Runs []string
	Out  string // folder for index.html, the plots and report.json
	// Groups, when set, compares runs as seeds of schedules (whale demo).
	Groups []report.GroupSpec
}

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write an HTML report of one or more runs: accuracy against rollouts, phase timeline, harness frontier, acceptance rates",
		ArgsUsage: "RUN...",
		Description: `Reads the runs' frozen specs and committed stages (nothing else: a run in
progress is reported as far as it got) and writes to --out:

   index.html     a summary table of the runs (with each run's final test
                  mean@k and its peak, the best over its tests, and where
                  it was reached), four kinds of plots with
                  captions, and a table of every weight step, harness
                  iteration and test of each run
   *.png          the plots: test mean@k against cumulative rollouts, the
                  phase timeline, each run's harness Pareto frontier, the
                  filter's acceptance rate per weight step
   report.json    every number on the page, to plot again elsewhere

The page needs no network: open index.html in any browser, or copy the
folder. Writing again replaces the files.`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Value: "report", Usage: "`DIR` to write the report into (created if needed)"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) == 0 {
				return usagef("report takes one or more run names (whale ls lists them)")
			}
			return runReport(c.Context, reportOptions{Root: c.String("root"), Runs: args, Out: c.String("out")}, c.App.Writer)
		}),
	}
}

// runReport collects the runs and writes the report; it prints the path
// of index.html.
func runReport(ctx context.Context, o reportOptions, out io.Writer) error {
	_, err := writeReport(ctx, o, out)
	return err
}

// writeReport is runReport returning what it collected, for callers that
// show more of it.
func writeReport(ctx context.Context, o reportOptions, out io.Writer) (*report.Data, error) {
	for _, r := range o.Runs {
		if err := storage.CheckRun(r); err != nil {
			return nil, err
		}
	}
	if o.Out == "" {
		return nil, usagef("--out: no folder given")
	}
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	// A missing run is the user's to fix: say so before reading anything
	// else.
	for _, r := range o.Runs {
		if _, err := readRun(ctx, store, r); err != nil {
			return nil, err
		}
	}
	d, err := report.Collect(ctx, store, o.Runs)
	if err != nil {
		return nil, err
	}
	if len(o.Groups) > 0 {
		if err := report.Compare(d, o.Groups); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, usageError{fmt.Errorf("--out %s: %w", o.Out, err)}
	}
	paths, err := report.Write(ctx, d, dir)
	if err != nil {
		return nil, err
	}
	if _, err = fmt.Fprintln(out, paths[0]); err != nil {
		return nil, err
	}
	return d, nil
}
