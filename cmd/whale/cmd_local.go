package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/localserve"
	"github.com/whalerun/whale/storage"
)

type localServeOptions struct {
	Root       string
	Checkpoint string
	Addr       string
	Name       string
	ready      func(url string) // tests: called once listening
}

func localCommand() *cli.Command {
	return &cli.Command{
		Name:  "local",
		Usage: "whale's built-in model",
		Subcommands: []*cli.Command{
			localPretrainCommand(),
			{
				Name:  "serve",
				Usage: "serve a built-in model checkpoint over the OpenAI-compatible API",
				Description: `Serves POST /v1/chat/completions (non-streaming), GET /v1/models and
vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter, which load
another checkpoint (a file or a finetune output directory) under a new
model name, so a finetune stage with reload vllm-lora hands its checkpoints
to this server as it would to vLLM. Concurrent requests are decoded
together in batches. --checkpoint is a local file or directory, or else an
object key in --root's bucket.`,
				Flags: []cli.Flag{
					rootFlag(),
					&cli.StringFlag{Name: "checkpoint", Required: true, Usage: "checkpoint `FILE` (or directory, or object key under --root)"},
					&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8000", Usage: "listen `ADDRESS`"},
					&cli.StringFlag{Name: "name", Value: "whale-local", Usage: "served model `NAME`"},
				},
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 0 {
						return usagef("local serve takes no arguments")
					}
					return runLocalServe(c.Context, localServeOptions{Root: c.String("root"), Checkpoint: c.String("checkpoint"),
						Addr: c.String("addr"), Name: c.String("name")}, c.App.Writer)
				}),
			},
		},
		Action: unknownSubcommand,
	}
}

// loadLocalCheckpoint reads a path when one exists on this machine, and
// otherwise an object under root.
func loadLocalCheckpoint(ctx context.Context, root, ref string) (*local.Model, error) {
	if _, err := os.Stat(ref); err == nil {
		return localserve.LoadPath(ref)
	} else if !errors.Is(err, fs.ErrNotExist) || root == "" {
		return nil, usageError{fmt.Errorf("--checkpoint %s: %w", ref, err)}
	}
	store, err := openRoot(ctx, root)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	data, err := store.ReadAll(ctx, ref)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, usagef("--checkpoint %s: neither a local path nor an object in %s", ref, store.URL())
	}
	if err != nil {
		return nil, fmt.Errorf("--checkpoint %s: %w", ref, err)
	}
	m, err := local.DecodeCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint %s in %s: %w", ref, store.URL(), err)
	}
	return m, nil
}

func runLocalServe(ctx context.Context, o localServeOptions, out io.Writer) error {
	m, err := loadLocalCheckpoint(ctx, o.Root, o.Checkpoint)
	if err != nil {
		return err
	}
	srv, err := localserve.New(m, localserve.Options{Name: o.Name, Root: o.Checkpoint})
	if err != nil {
		return usageError{err}
	}
	h, err := localserve.Listen(o.Addr, srv)
	if err != nil {
		srv.Close()
		return usageError{fmt.Errorf("--addr: %w", err)}
	}
	cfg := m.Config()
	fmt.Fprintf(out, "serving %s (%d parameters, context %d, digest %.16s) on %s\n", o.Name, m.NumParams(), cfg.Context, m.Digest(), h.URL)
	if o.ready != nil {
		o.ready(h.URL)
	}
	errc := make(chan error, 1)
	go func() { errc <- h.Wait() }()
	select {
	case err := <-errc:
		srv.Close()
		return err
	case <-ctx.Done():
		slog.Info("local serve: shutting down")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return h.Shutdown(sctx)
	}
}
