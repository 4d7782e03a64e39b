package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/dataprep"
	"github.com/whalerun/whale/internal/buildinfo"
)

func dataSplitCommand() *cli.Command {
	return &cli.Command{
		Name:      "split",
		Usage:     "split one dataset into train, search and test datasets, by a hash of (seed, task id)",
		ArgsUsage: "DATASET",
		Description: `Splits the imported dataset DATASET into up to three new datasets:
--test tasks into DATASET-test, --search into DATASET-search (the paper's
D_harness: 256 by default) and --train into DATASET-train; --test-name,
--search-name and --train-name name them otherwise. A count of 0 makes no
dataset for that role; the tasks beyond the three counts are in none.

A task's set depends only on a SHA-256 digest of (--seed, its id), never
on its row: tasks are ranked by digest, and the first --test go to test,
the next --search to search, the next --train to train. The same dataset,
counts and seed always give the same split, in any row order; a larger
--train leaves test and search as they were. Each task's split field is
set to its role.

The outputs are committed like imports, with the source's digest, the
counts and the seed as their config: splitting again with the same
inputs does nothing, and a name taken by other data is refused before
anything is written (exit code 3). More tasks asked than DATASET has, a
negative count, or an unknown dataset is bad input (exit code 2). Memory
holds a 16-byte digest per task kept, never the rows: DATASET is read
twice.

whale init refuses an experiment whose train, search and test datasets
share a task id or a question (compared lowercased, whitespace collapsed).

Example:
  whale data split dapo-math --train 16000 --search 256 --test 500 --seed 1
  # then in the experiment:  data: {train: datasets/dapo-math-train,
  #   search: datasets/dapo-math-search, test: datasets/dapo-math-test}`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.IntFlag{Name: "train", Usage: "`N` tasks for the training set"},
			&cli.IntFlag{Name: "search", Value: dataprep.DefaultSearch, Usage: "`N` tasks for the harness search set D_harness"},
			&cli.IntFlag{Name: "test", Usage: "`N` tasks for the test set"},
			&cli.Uint64Flag{Name: "seed", Usage: "`SEED` of the hash that assigns the tasks"},
			&cli.StringFlag{Name: "train-name", Usage: "`NAME` of the training dataset (default DATASET-train)"},
			&cli.StringFlag{Name: "search-name", Usage: "`NAME` of the search dataset (default DATASET-search)"},
			&cli.StringFlag{Name: "test-name", Usage: "`NAME` of the test dataset (default DATASET-test)"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 1 {
				return usagef("data split takes one dataset name, got %d arguments", len(args))
			}
			return runSplit(c.Context, c.String("root"), dataprep.SplitOptions{Source: args[0],
				Train: c.Int("train"), Search: c.Int("search"), Test: c.Int("test"), Seed: c.Uint64("seed"),
				TrainName: c.String("train-name"), SearchName: c.String("search-name"), TestName: c.String("test-name"),
				WhaleVersion: buildinfo.Version()}, c.App.Writer)
		}),
	}
}

func runSplit(ctx context.Context, root string, o dataprep.SplitOptions, out io.Writer) error {
	store, err := openRoot(ctx, root)
	if err != nil {
		return err
	}
	defer store.Close()
	res, err := dataprep.Split(ctx, store, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "split %d tasks of dataset %s (seed %d) in %s:\n", res.Rows, res.Source, o.Seed, store.URL())
	for _, p := range res.Outputs {
		note := ""
		if p.Existed {
			note = " (already there: nothing to do)"
		}
		fmt.Fprintf(out, "  %-6s %6d tasks  datasets/%s%s\n", p.Role, p.Rows, p.Name, note)
	}
	fmt.Fprintf(out, "  %d tasks in none\n", res.Left)
	return nil
}
