package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

type importOptions struct {
	Root   string
	File   string
	Name   string // dataset name; default: the file's stem
	Format string // jsonl, lichess, verl; "" detects
	Domain string
	Split  string
}

func dataCommand() *cli.Command {
	return &cli.Command{
		Name:   "data",
		Usage:  "bring task tables into the bucket and split them",
		Action: unknownSubcommand,
		Subcommands: []*cli.Command{{
			Name:      "import",
			Usage:     "import tasks from JSONL, the Lichess puzzle CSV or verl/Search-R1 Parquet into datasets/<name>",
			ArgsUsage: "FILE",
			Description: `Reads FILE (.jsonl, .csv, .parquet; .gz and .zst are decompressed),
checks every record, and writes the tasks table to datasets/<name>/ in the
bucket, committed by a manifest written last. Bad input stops the import
with one error naming the file, line (or row) and column; nothing becomes
visible. Importing the same file again does nothing; other data under a
taken name is refused (exit code 3). A task's domain (from the data or
--domain) must be a known one; text must be UTF-8 (bytes that are not are
an error naming the line and byte offset, never replaced). A file:// root
that does not exist yet is created.

Bounds: a JSONL line or CSV record (one task) is at most 8 MiB, a file at
most 8 GiB, and so is what a .gz or .zst file decompresses to. FILE may be
a FIFO or /dev/stdin: it is read once, bounded, into a temporary copy.
SIGINT or SIGTERM (Ctrl-C) stops the import between two reads; nothing
is written.

JSONL fields: id, question (or prompt, problem), answers (or answer,
golden_answers), split, domain, meta; other fields go into meta.
Lichess CSV: PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,
Themes,GameUrl[,OpeningTags]. verl Parquet: data_source, prompt,
reward_model.ground_truth, extra_info.`,
			Flags: []cli.Flag{
				rootFlag(),
				&cli.StringFlag{Name: "name", Usage: "dataset `NAME` (lowercase letters, digits, dashes); default: the file's name without extensions"},
				&cli.StringFlag{Name: "format", Usage: "jsonl, lichess or verl; default: from the file's extension and first bytes"},
				&cli.StringFlag{Name: "domain", Usage: "domain of the tasks where the data does not say: " + strings.Join(registry.Names(), ", ")},
				&cli.StringFlag{Name: "split", Usage: "split of the tasks where the data does not say: train, search, test, ..."},
			},
			Action: action(func(c *cli.Context, args []string) error {
				if len(args) != 1 {
					return usagef("data import takes one file, got %d arguments", len(args))
				}
				return runImport(c.Context, importOptions{
					Root: c.String("root"), File: args[0], Name: c.String("name"),
					Format: c.String("format"), Domain: c.String("domain"), Split: c.String("split"),
				}, c.App.Writer)
			}),
		}, dataSplitCommand()},
	}
}

// importConfig is what a dataset is a function of: the same file imported
// with the same options is the same dataset.
type importConfig struct {
	Source string `json:"source"` // base name, for people
	SHA256 string `json:"sha256"` // of the file's bytes as stored
	Format string `json:"format"`
	Domain string `json:"domain,omitempty"`
	Split  string `json:"split,omitempty"`
}

func runImport(ctx context.Context, o importOptions, out io.Writer) error {
	format := importers.FormatUnknown
	var err error
	if o.Format != "" {
		if format, err = importers.ParseFormat(o.Format); err != nil {
			return usageError{fmt.Errorf("--format: %w", err)}
		}
	}
	if o.Domain != "" {
		if _, err := registry.Get(o.Domain); err != nil {
			return usageError{fmt.Errorf("--domain: %w", err)}
		}
	}
	if o.Name == "" {
		o.Name = datasetStem(o.File)
	}
	if err := storage.CheckDataset(o.Name); err != nil {
		return usageError{fmt.Errorf("--name: %w", err)}
	}
	opts := importers.Options{Domain: o.Domain, Split: o.Split, Domains: registry.Names()}
	// The file is read bounded and until ctx ends; one that is not
	// regular (a FIFO, /dev/stdin) is read once, into a copy.
	in, err := importers.OpenInput(ctx, o.File, opts)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return usageError{err}
	}
	defer in.Close()
	if format == importers.FormatUnknown {
		if format, err = in.Detect(); err != nil {
			return usageError{err}
		}
	}
	sum, err := inputSHA256(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return usageError{err}
	}
	store, err := createRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := importConfig{Source: filepath.Base(o.File), SHA256: sum, Format: format.String(), Domain: o.Domain, Split: o.Split}
	dw, prev, err := storage.NewDatasetWriter(ctx, store, o.Name, cfg, buildinfo.Version())
	if err != nil {
		return err
	}
	if prev != nil {
		fmt.Fprintf(out, "dataset %s already holds %s (%d tasks); nothing to do\n", o.Name, cfg.Source, prev.Rows("tasks"))
		return nil
	}
	committed := false
	defer func() {
		if !committed {
			dw.Abort()
		}
	}()
	pw, err := dw.Create(ctx, "tasks", "parquet")
	if err != nil {
		return err
	}
	tw, err := schemas.NewWriter[schemas.Task](pw, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	st := newImportStats()
	// The importers report bad input with more than one error type (a
	// missing Parquet column is not an *importers.Error) and wrap what the
	// callback returns as an *importers.Error too; so what is our side's
	// fault (the spool, a cancel) is told apart here, and the rest is the
	// input's.
	var sinkErr error
	err = in.Import(ctx, format, opts, func(t schemas.Task) error {
		if err := st.add(t); err != nil {
			return err
		}
		if err := tw.Write(t); err != nil {
			sinkErr = err
			return err
		}
		return nil
	})
	if err != nil {
		// Importer errors name the file (and the line, row, column) already.
		if !strings.Contains(err.Error(), o.File) {
			err = fmt.Errorf("import %s: %w", o.File, err)
		}
		err = fmt.Errorf("%w (nothing was written)", err)
		if sinkErr != nil || ctx.Err() != nil {
			return err
		}
		return usageError{err}
	}
	if st.rows == 0 {
		return usagef("import %s: the file holds no tasks (nothing was written)", o.File)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := pw.Finish(tw.Rows()); err != nil {
		return err
	}
	m, err := dw.Commit(ctx, st.summary())
	if err != nil {
		return err
	}
	committed = true
	fmt.Fprintf(out, "imported %d tasks from %s (%s) into %s/%s\n", m.Rows("tasks"), o.File, format, store.URL(), m.Dir)
	for _, k := range slices.Sorted(maps.Keys(st.domains)) {
		fmt.Fprintf(out, "  domain %-10s %d\n", cmp.Or(k, "(none)"), st.domains[k])
	}
	for _, k := range slices.Sorted(maps.Keys(st.splits)) {
		fmt.Fprintf(out, "  split  %-10s %d\n", cmp.Or(k, "(none)"), st.splits[k])
	}
	return nil
}

var errDuplicateID = errors.New("duplicate task id")

// importStats counts tasks by domain and split and catches repeated ids.
// It keeps a 64-bit hash per id rather than the id: about 40 bytes a task
// (200 MB for the 5M-puzzle Lichess dump) instead of the ids themselves.
type importStats struct {
	seed    maphash.Seed
	seen    map[uint64]struct{}
	rows    int64
	domains map[string]int64
	splits  map[string]int64
}

func newImportStats() *importStats {
	return &importStats{seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}, domains: map[string]int64{}, splits: map[string]int64{}}
}

func (s *importStats) add(t schemas.Task) error {
	h := maphash.String(s.seed, t.ID)
	if _, dup := s.seen[h]; dup {
		return fmt.Errorf("%w %q", errDuplicateID, t.ID)
	}
	s.seen[h] = struct{}{}
	s.rows++
	s.domains[t.Domain]++
	s.splits[t.Split]++
	return nil
}

func (s *importStats) summary() map[string]any {
	return map[string]any{"tasks": s.rows, "domains": s.domains, "splits": s.splits}
}

// inputSHA256 is the digest of the file's bytes as stored.
func inputSHA256(ctx context.Context, in *importers.Input) (string, error) {
	r, err := in.Open(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", fmt.Errorf("read %s: %w", in.Name(), err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// datasetStem turns "data/Lichess_Puzzles.csv.zst" into "lichess-puzzles".
func datasetStem(path string) string {
	base := filepath.Base(path)
	for {
		ext := filepath.Ext(base)
		if ext == "" || len(ext) > 9 {
			break
		}
		base = base[:len(base)-len(ext)]
	}
	b := []rune{}
	for _, r := range base {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b = append(b, r)
		case r >= 'A' && r <= 'Z':
			b = append(b, r-'A'+'a')
		default:
			if len(b) > 0 && b[len(b)-1] != '-' {
				b = append(b, '-')
			}
		}
	}
	for len(b) > 0 && b[len(b)-1] == '-' {
		b = b[:len(b)-1]
	}
	return string(b)
}
