package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/searchqa"
)

type indexBuildOptions struct {
	Root   string
	Corpus string
	Name   string
}

type indexServeOptions struct {
	Root     string
	Name     string
	Addr     string
	CacheDir string
	Token    serveToken
	// MaxInFlight bounds the requests answered at once (429 beyond it);
	// 0 means the server's default.
	MaxInFlight int
	// ready, when set, is told the address the server listens on (tests
	// pass port 0).
	ready func(addr string)
}

func indexCommand() *cli.Command {
	return &cli.Command{
		Name:  "index",
		Usage: "build and serve BM25 retrieval indexes for search QA",
		Subcommands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "index a passage corpus (JSONL {id, contents} or Parquet) and store it in the bucket under indexes/<name>",
				ArgsUsage: "CORPUS",
				Description: `Each corpus record is {"id", "contents"} whose first line is the title
(the Search-R1 / DPR wiki layout); .jsonl, .jsonl.gz, .jsonl.zst and
.parquet are read as a stream. The index (bleve, BM25, English analyzer) is
built in a local temporary folder, packed into one archive and committed
under indexes/<name> as a dataset is, its _MANIFEST.json written last.
Building the same corpus again is a no-op; another corpus under a taken
name is refused.`,
				Flags: []cli.Flag{
					rootFlag(),
					&cli.StringFlag{Name: "name", Usage: "index `NAME`; default: the corpus file's name without extensions"},
				},
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 1 {
						return usagef("index build takes one corpus file, got %d arguments", len(args))
					}
					return runIndexBuild(c.Context, indexBuildOptions{Root: c.String("root"), Corpus: args[0], Name: c.String("name")}, c.App.Writer)
				}),
			},
			{
				Name:  "serve",
				Usage: "answer the Search-R1 retrieval API (POST /retrieve) from an index in the bucket",
				Description: `Downloads indexes/<name> into a local cache (reused while the corpus is
the same) and serves POST /retrieve {"queries": [...], "topk": k,
"return_scores": true} and GET /health until interrupted.

A request holds at most 4096 queries of at most 4096 bytes each in a body
of at most 1 MiB (400, 413), declared as application/json or not at all
(415), read within 30 seconds and answered within 60 (503 past it). When
$WHALE_SERVE_TOKEN (or the variable --token-env names) is set, /retrieve
needs it as "Authorization: Bearer TOKEN" (401). Requests beyond
--max-in-flight get 429 with Retry-After, which whale's client waits out.`,
				Flags: []cli.Flag{
					rootFlag(),
					&cli.StringFlag{Name: "name", Required: true, Usage: "index `NAME` under indexes/"},
					&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8000", Usage: "listen `ADDRESS`"},
					&cli.StringFlag{Name: "cache", Usage: "local cache `DIR` for unpacked indexes (default: the user cache dir)"},
					tokenFlag(),
					&cli.IntFlag{Name: "max-in-flight", Usage: "requests answered at once, more get 429 (`N`; default 64)"},
				},
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 0 {
						return usagef("index serve takes no arguments")
					}
					return runIndexServe(c.Context, indexServeOptions{Root: c.String("root"), Name: c.String("name"),
						Addr: c.String("addr"), CacheDir: c.String("cache"), Token: tokenOf(c), MaxInFlight: c.Int("max-in-flight")}, c.App.Writer)
				}),
			},
		},
	}
}

func runIndexBuild(ctx context.Context, o indexBuildOptions, out io.Writer) error {
	if _, err := os.Stat(o.Corpus); err != nil {
		return usageError{fmt.Errorf("corpus: %w", err)}
	}
	if o.Name == "" {
		o.Name = datasetStem(o.Corpus)
	}
	if err := searchqa.Indexes.Check(o.Name); err != nil {
		return usageError{fmt.Errorf("--name: %w", err)}
	}
	// Like data import, building an index may be a root's first write.
	store, err := createRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	tmp, err := os.MkdirTemp("", "whale-index-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "index")
	stats, err := searchqa.BuildIndex(ctx, dir, searchqa.FileCorpus(o.Corpus), searchqa.BuildOptions{})
	if err != nil {
		return usageError{fmt.Errorf("index %s: %w (nothing was stored)", o.Corpus, err)}
	}
	si, err := searchqa.UploadIndex(ctx, store, o.Name, dir)
	if errors.Is(err, searchqa.ErrIndexDiffers) {
		return conflictError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "indexed %d passages from %s in %s (%d repeated ids replaced); stored %s/%s (%s, corpus %s)\n",
		stats.Docs, o.Corpus, stats.Elapsed.Round(time.Millisecond), stats.Duplicates, store.URL(), searchqa.Indexes.Dir(o.Name),
		humanBytes(si.Archive.Size), si.CorpusDigest)
	return nil
}

func runIndexServe(ctx context.Context, o indexServeOptions, out io.Writer) error {
	if err := searchqa.Indexes.Check(o.Name); err != nil {
		return usageError{fmt.Errorf("--name: %w", err)}
	}
	token, err := o.Token.value()
	if err != nil {
		return err
	}
	if o.MaxInFlight < 0 {
		return usagef("--max-in-flight %d: want ≥ 1", o.MaxInFlight)
	}
	ix, err := openStoredIndex(ctx, o.Root, o.Name, o.CacheDir)
	if err != nil {
		return err
	}
	defer ix.Close()
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return usageError{fmt.Errorf("--addr: %w", err)}
	}
	srv := searchqa.NewHTTPServer(ix, searchqa.ServerOptions{Token: token, MaxInFlight: o.MaxInFlight})
	fmt.Fprintf(out, "serving index %s (%d passages) on http://%s/retrieve; %s\n", o.Name, ix.Info().Docs, ln.Addr(), o.Token.describe(token, o.Addr))
	if o.ready != nil {
		o.ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		slog.Info("index serve: shutting down")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// openStoredIndex opens index name of the bucket at root (whale index
// serve, whale harness run --index).
func openStoredIndex(ctx context.Context, root, name, cacheDir string) (*searchqa.Index, error) {
	store, err := openRoot(ctx, root)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	ix, err := searchqa.OpenStored(ctx, store, name, cacheDir)
	if errors.Is(err, searchqa.ErrNoIndex) {
		return nil, usagef("no index %q in %s (build it with whale index build)", name, store.URL())
	}
	return ix, err
}
