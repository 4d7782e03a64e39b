package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
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
	// AdapterDir is the one directory /v1/load_lora_adapter reads; empty
	// turns the endpoint off (404).
	AdapterDir string
	Token      serveToken
	// MaxInFlight bounds the requests handled at once (429 beyond it);
	// 0 means the server's default.
	MaxInFlight int
	// PrefixCacheMiB bounds the server's prefix cache; 0 turns it off.
	PrefixCacheMiB int
	ready          func(url string) // tests: called once listening
}

// DefaultTokenEnv is the variable --token-env names by default: when it
// is set, the servers require its value as a bearer token.
const DefaultTokenEnv = "WHALE_SERVE_TOKEN"

// serveToken is where a server's bearer token comes from.
type serveToken struct {
	Env string // the variable's name
	// Required is set when --token-env was given: an empty variable is
	// then an error rather than "no token".
	Required bool
}

func tokenFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "token-env", Value: DefaultTokenEnv,
		Usage: "require the bearer token held in environment variable `NAME` (when set; an explicit --token-env must be set)"}
}

func tokenOf(c *cli.Context) serveToken {
	return serveToken{Env: c.String("token-env"), Required: c.IsSet("token-env")}
}

// value reads the token; it is never printed.
func (t serveToken) value() (string, error) {
	if t.Env == "" {
		return "", nil
	}
	v := strings.TrimSpace(os.Getenv(t.Env))
	if v == "" && t.Required {
		return "", usagef("--token-env %s: the variable is empty or unset", t.Env)
	}
	return v, nil
}

// describe says how requests are authorised, and warns when a server
// that listens beyond loopback takes requests from anyone.
func (t serveToken) describe(token, addr string) string {
	if token != "" {
		return "requests need the bearer token in $" + t.Env
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			slog.Warn("serving beyond loopback without a token: anyone who reaches "+addr+" can use this server; set "+t.Env, "addr", addr)
		}
	}
	return "no token required (set $" + t.Env + " to require one)"
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
object key in --root's bucket.

Loading at runtime is off unless --adapter-dir names the directory the
checkpoints are in (the finetune stage's work directory, e.g. $TMPDIR):
without it the two endpoints answer 404, as vLLM's do without
VLLM_ALLOW_RUNTIME_LORA_UPDATING. lora_path must then lie under that
directory (no "..", no symbolic link out of it) and name a checkpoint file
of at most 1 GiB, or a directory holding model.whalelm. POST bodies must
be application/json (415). When $WHALE_SERVE_TOKEN (or the variable
--token-env names) is set, every request but GET /health needs it as
"Authorization: Bearer TOKEN" (401); give clients model.api_key_env.
Requests beyond --max-in-flight get 429 with Retry-After; a request is
given 10 minutes, its body 30 seconds.`,
				Flags: []cli.Flag{
					rootFlag(),
					&cli.StringFlag{Name: "checkpoint", Required: true, Usage: "checkpoint `FILE` (or directory, or object key under --root)"},
					&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8000", Usage: "listen `ADDRESS`"},
					&cli.StringFlag{Name: "name", Value: "whale-local", Usage: "served model `NAME`"},
					&cli.StringFlag{Name: "adapter-dir", Usage: "allow /v1/load_lora_adapter to load checkpoints under `DIR` only (default: loading off, 404)"},
					tokenFlag(),
					&cli.IntFlag{Name: "max-in-flight", Usage: "requests handled at once, more get 429 (`N`; default 256, 4 batches)"},
					&cli.IntFlag{Name: "prefix-cache-mib", Value: localserve.DefaultPrefixCacheBytes >> 20, Usage: "keep the keys and values of recent sequences, up to `MIB`, so that a prompt extending one (an episode's next turn) is fed only from where they part; 0 turns the cache off"},
				},
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 0 {
						return usagef("local serve takes no arguments")
					}
					return runLocalServe(c.Context, localServeOptions{Root: c.String("root"), Checkpoint: c.String("checkpoint"),
						Addr: c.String("addr"), Name: c.String("name"), AdapterDir: c.String("adapter-dir"), Token: tokenOf(c),
						MaxInFlight: c.Int("max-in-flight"), PrefixCacheMiB: c.Int("prefix-cache-mib")}, c.App.Writer)
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
	token, err := o.Token.value()
	if err != nil {
		return err
	}
	if o.MaxInFlight < 0 {
		return usagef("--max-in-flight %d: want ≥ 1", o.MaxInFlight)
	}
	cacheBytes := int64(o.PrefixCacheMiB) << 20
	switch {
	case o.PrefixCacheMiB < 0 || o.PrefixCacheMiB > 1<<20:
		return usagef("--prefix-cache-mib %d: want 0 (off) to %d", o.PrefixCacheMiB, 1<<20)
	case o.PrefixCacheMiB == 0:
		cacheBytes = -1
	}
	if o.AdapterDir != "" {
		if fi, err := os.Stat(o.AdapterDir); err != nil || !fi.IsDir() {
			return usagef("--adapter-dir %s: not a directory", o.AdapterDir)
		}
	}
	m, err := loadLocalCheckpoint(ctx, o.Root, o.Checkpoint)
	if err != nil {
		return err
	}
	srv, err := localserve.New(m, localserve.Options{Name: o.Name, Root: o.Checkpoint, AdapterDir: o.AdapterDir, Token: token, MaxInFlight: o.MaxInFlight,
		PrefixCacheBytes: cacheBytes})
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
	adapters := "loading adapters at runtime is off (no --adapter-dir)"
	if o.AdapterDir != "" {
		adapters = "adapters load from " + o.AdapterDir
	}
	fmt.Fprintf(out, "%s; %s\n", adapters, o.Token.describe(token, o.Addr))
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
