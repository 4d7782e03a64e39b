package main

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/models/local"
)

// localPretrainCommand is `whale local pretrain`: it makes a demo world's
// starting checkpoint from scratch, and optionally writes its task sets.
func localPretrainCommand() *cli.Command {
	return &cli.Command{
		Name:  "pretrain",
		Usage: "make a demo world's starting local model from generated data",
		Description: `Trains models/local's model for a demo world (--world: search or arithmetic)
from its seed on conversations the world generates, and saves it to --out.
With the defaults it reproduces the committed checkpoint
(domains/searchdemo/testdata/pretrained.wlm, domains/demo/testdata/pretrained.wlm)
bit for bit when run with --procs 2 (the gradient groups, hence the float
sums, follow the number of threads). --tasks-out also writes the world's
train, search and test tasks (and the search world's corpus) as JSONL.
Zero --seed, --steps, --batch or --lr take the world's defaults.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "checkpoint `FILE` to write (required)"},
			&cli.StringFlag{Name: "world", Value: demoWorlds[0].name, Usage: "the demo `WORLD` (see whale demo --help)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the initialisation and of the data (default: the world's, 1)"},
			&cli.IntFlag{Name: "steps", Usage: "optimiser steps (default: the world's)"},
			&cli.IntFlag{Name: "batch", Usage: "conversations per step (default: the world's, 32)"},
			&cli.Float64Flag{Name: "lr", Usage: "peak learning rate (default: the world's, 3e-3)"},
			&cli.IntFlag{Name: "procs", Value: 2, Usage: "training threads (GOMAXPROCS); the weights depend on it"},
			&cli.StringFlag{Name: "tasks-out", Usage: "also write the world's task files to `DIR`"},
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
			w, err := lookupDemoWorld(c.String("world"))
			if err != nil {
				return usageError{fmt.Errorf("local pretrain: %w", err)}
			}
			o := local.PretrainOptions{Seed: c.Uint64("seed"), Steps: c.Int("steps"), Batch: c.Int("batch"), LR: c.Float64("lr"), Log: slog.Default()}
			if o.Steps < 0 || o.Batch < 0 || o.LR < 0 {
				return usagef("local pretrain: --steps, --batch and --lr must not be negative")
			}
			if dir := c.String("tasks-out"); dir != "" {
				seed := o.Seed
				if seed == 0 {
					seed = w.defaultSeed
				}
				paths, err := w.files(dir, seed)
				if err != nil {
					return err
				}
				for _, p := range paths {
					fmt.Fprintln(c.App.Writer, "wrote", p)
				}
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Int("procs")))
			m, err := w.pretrain(c.Context, o)
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
