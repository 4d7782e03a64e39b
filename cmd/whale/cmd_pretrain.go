package main

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/demo"
)

// localPretrainCommand is `whale local pretrain`: it makes the demo
// domain's starting checkpoint from scratch, and optionally writes the
// demo's task sets.
func localPretrainCommand() *cli.Command {
	d := demo.DefaultPretrain
	return &cli.Command{
		Name:  "pretrain",
		Usage: "make the demo domain's starting local model from generated data",
		Description: `Trains models/local's demo model from its seed on conversations the demo
domain generates, and saves it to --out. With the defaults it reproduces
domains/demo/testdata/pretrained.wlm bit for bit when run with --procs 2
(the gradient groups, hence the float sums, follow the number of threads).
--tasks-out also writes the demo's train, search and test tasks as JSONL.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "checkpoint `FILE` to write (required)"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the initialisation and of the data"},
			&cli.IntFlag{Name: "steps", Value: d.Steps, Usage: "optimiser steps"},
			&cli.IntFlag{Name: "batch", Value: d.Batch, Usage: "conversations per step"},
			&cli.Float64Flag{Name: "lr", Value: d.LR, Usage: "peak learning rate"},
			&cli.IntFlag{Name: "procs", Value: 2, Usage: "training threads (GOMAXPROCS); the weights depend on it"},
			&cli.StringFlag{Name: "tasks-out", Usage: "also write demo-{train,search,test}.jsonl to `DIR`"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) > 0 {
				return usagef("local pretrain takes no arguments, got %q", args)
			}
			out := c.String("out")
			if out == "" {
				return usagef("local pretrain: --out FILE is required")
			}
			if p := c.Int("procs"); p < 1 {
				return usagef("local pretrain: --procs %d, want ≥ 1", p)
			}
			if dir := c.String("tasks-out"); dir != "" {
				paths, err := demo.WriteDatasets(dir, c.Uint64("seed"))
				if err != nil {
					return err
				}
				for _, p := range paths {
					fmt.Fprintln(c.App.Writer, "wrote", p)
				}
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Int("procs")))
			m, err := demo.Pretrain(c.Context, demo.PretrainOptions{
				Seed: c.Uint64("seed"), Steps: c.Int("steps"), Batch: c.Int("batch"), LR: c.Float64("lr"),
				Log: slog.Default(),
			})
			if err != nil {
				return err
			}
			if err := m.Save(out, false); err != nil {
				return fmt.Errorf("local pretrain: %w", err)
			}
			fmt.Fprintf(c.App.Writer, "wrote %s (step %d, digest %s)\n", out, m.Step(), m.Digest())
			return nil
		}),
	}
}
