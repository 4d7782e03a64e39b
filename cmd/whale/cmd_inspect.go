package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/storage"
)

// leaseFolder is where a run's lease generations live.
func leaseFolder(run string) string { return storage.Join("runs", run, "lease") }

// humanBytes prints sizes the way ls -h does.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func totalSize(m *storage.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// tableRows renders "rollouts=2048 evals=12" for a manifest.
func tableRows(m *storage.Manifest) string {
	rows := map[string]int64{}
	for _, f := range m.Files {
		rows[f.Table] += f.Rows
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(rows)) {
		parts = append(parts, fmt.Sprintf("%s=%d", t, rows[t]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// ---- ls

type lsOptions struct {
	Root string
	Run  string // "" lists runs and datasets

	// Files lists the committed files of Run instead of its stages: those
	// of table Table, of stage Stage when set, in Format (filesList,
	// filesJSON or filesDuckDB, whose view is called View, or Table).
	Files  bool
	Stage  string
	Table  string
	Format string
	View   string
}

func lsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list committed stages of a run with rows and sizes, or its committed files (--files); without RUN, the runs and datasets",
		ArgsUsage: "[RUN]",
		Description: `Only committed folders are listed: a stage whose _MANIFEST.json is not
written yet (running, or left by a crash) does not exist for readers.

With --files, whale ls RUN prints the files outside readers (DuckDB,
pyarrow, polars) should read: those named by the newest committed attempt
of each stage at each position. Globbing the bucket
(runs/*/stages/*/rollouts-*.parquet) is unsafe: it also reads attempts
replaced by whale stage --force and the leftovers of crashed tries.
  --format list    one URL a line (file:///abs/path or s3://bucket/prefix/key)
  --format json    an array of {file, run, position, stage, attempt, table,
                   shard, rows, size, sha256}
  --format duckdb  a CREATE VIEW over read_parquet([...]) that DuckDB runs as
                   it is: local paths for file:// roots; for s3:// a secret
                   that takes credentials from the AWS credential chain
                   (whale never prints one) with the root's endpoint settings

Examples:
  whale ls chess-whale --files --root file:///data/whale
  whale ls chess-whale --files --stage evaluate --format json
  whale ls chess-whale --files --format duckdb | duckdb whale.db`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.BoolFlag{Name: "files", Usage: "print RUN's committed files instead of its stages"},
			&cli.StringFlag{Name: "stage", Usage: "with --files: only the files of `STAGE` stages (rollout, evaluate, ...)"},
			&cli.StringFlag{Name: "table", Value: defaultFilesTable, Usage: "with --files: the files of `TABLE`"},
			&cli.StringFlag{Name: "format", Value: filesList, Usage: "with --files: `FORMAT` " + strings.Join(filesFormats, ", ")},
			&cli.StringFlag{Name: "view", Usage: "with --format duckdb: the view's `NAME` (default: the table's)"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) > 1 {
				return usagef("ls takes at most one run name, got %d arguments", len(args))
			}
			o := lsOptions{Root: c.String("root"), Files: c.Bool("files"), Stage: c.String("stage"),
				Table: c.String("table"), Format: c.String("format"), View: c.String("view")}
			if len(args) == 1 {
				o.Run = args[0]
			}
			if !o.Files {
				for _, f := range []string{"stage", "table", "format", "view"} {
					if c.IsSet(f) {
						return usagef("--%s goes with --files", f)
					}
				}
			}
			return runLs(c.Context, o, c.App.Writer)
		}),
	}
}

func runLs(ctx context.Context, o lsOptions, out io.Writer) error {
	if o.Files && o.Run == "" {
		return usagef("ls --files lists the files of one run: whale ls RUN --files")
	}
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	if o.Files {
		return listFiles(ctx, store, o, out)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	if o.Run != "" {
		if _, err := readRun(ctx, store, o.Run); err != nil {
			return err
		}
		ms, err := storage.ListCommitted(ctx, store, o.Run)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "STAGE\tATTEMPT\tSHARDS\tROWS\tSIZE\tCOMMITTED")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", m.Folder(), m.Attempt, m.Shards, tableRows(m),
				humanBytes(totalSize(m)), m.Finished.Local().Format(time.DateTime))
		}
		if len(ms) == 0 {
			fmt.Fprintln(tw, "(no committed stages yet)")
		}
		return nil
	}
	runs, err := listRuns(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "RUN\tDOMAIN\tSCHEDULE\tSPEC")
	for _, r := range runs {
		run, err := readRun(ctx, store, r)
		if err != nil {
			fmt.Fprintf(tw, "%s\t?\t?\t%v\n", r, err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r, run.Spec.Domain, run.Spec.Schedule, run.SpecDigest)
	}
	if len(runs) == 0 {
		fmt.Fprintln(tw, "(no runs)")
	}
	ds, err := storage.ListDatasets(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "\nDATASET\tROWS\tSIZE\tSOURCE")
	for _, l := range ds {
		if l.Err != nil {
			fmt.Fprintf(tw, "%s%s\t?\t?\t%v\n", storage.DatasetsPrefix, l.Name, l.Err)
			continue
		}
		m := l.Manifest
		var cfg importConfig
		_ = json.Unmarshal(m.Config, &cfg)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Dir, tableRows(m), humanBytes(totalSize(m)), cmp.Or(cfg.Source, "-"))
	}
	if len(ds) == 0 {
		fmt.Fprintln(tw, "(no datasets)")
	}
	return nil
}

// listRuns returns the names of runs that have a run.json.
func listRuns(ctx context.Context, store *storage.Store) ([]string, error) {
	var names []string
	err := store.List(ctx, "runs/", true, func(e storage.Entry) error {
		if e.IsDir {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(e.Key, "runs/"), "/"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if ok, err := store.Exists(ctx, runKey(n)); err != nil {
			return nil, err
		} else if ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// ---- show

type showOptions struct {
	Root    string
	Target  string
	Rows    int
	Width   int
	Columns []string
	JSON    bool
}

func showCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print a committed stage's manifest and the first rows of its Parquet as a table",
		ArgsUsage: "RUN/STAGE | datasets/NAME | FILE.parquet",
		Description: `STAGE is a folder name such as r003-w02-rollout (the newest committed
attempt) or r003-w02-rollout.a2 (one attempt). A local Parquet file is shown
from its footer and first rows, whichever tool wrote it.`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.IntFlag{Name: "rows", Aliases: []string{"n"}, Value: 10, Usage: "how many rows to print"},
			&cli.IntFlag{Name: "width", Value: 40, Usage: "truncate each cell to `N` characters (0: no limit)"},
			&cli.StringSliceFlag{Name: "columns", Aliases: []string{"c"}, Usage: "only these columns (repeat or comma-separate)"},
			&cli.BoolFlag{Name: "json", Usage: "print the manifest as JSON and no rows"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 1 {
				return usagef("show takes one stage, dataset or file, got %d arguments", len(args))
			}
			return runShow(c.Context, showOptions{Root: c.String("root"), Target: args[0], Rows: c.Int("rows"),
				Width: c.Int("width"), Columns: c.StringSlice("columns"), JSON: c.Bool("json")}, c.App.Writer)
		}),
	}
}

func runShow(ctx context.Context, o showOptions, out io.Writer) error {
	// No stage or dataset name ends in .parquet, so such a target is a
	// local file; falling through to the bucket would only ask for --root.
	if strings.HasSuffix(o.Target, ".parquet") {
		f, err := os.Open(o.Target)
		if err != nil {
			return usageError{fmt.Errorf("show: %w (a .parquet argument is a local file; show committed files by RUN/STAGE or datasets/NAME)", err)}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "file %s (%s)\n", o.Target, humanBytes(st.Size()))
		if err := printHead(ctx, out, f, st.Size(), o.Rows, o.Width, o.Columns); err != nil {
			var ue usageError
			if errors.As(err, &ue) {
				return err
			}
			// A local file that does not read as Parquet is bad input.
			return usageError{fmt.Errorf("show %s: %w", o.Target, err)}
		}
		return nil
	}
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	m, err := resolveManifest(ctx, store, o.Target)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	printManifest(out, m)
	for _, f := range m.Files {
		if !strings.HasSuffix(f.Name, ".parquet") {
			continue
		}
		ra, err := m.OpenFile(ctx, store, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%s\n", f.Name)
		if err := printHead(ctx, out, ra, ra.Size(), o.Rows, o.Width, o.Columns); err != nil {
			return fmt.Errorf("%s: %w", m.FileKey(f), err)
		}
		// The first file shows what the table looks like; more would
		// bury the manifest.
		break
	}
	return nil
}

// resolveManifest finds the manifest a show target names.
func resolveManifest(ctx context.Context, store *storage.Store, target string) (*storage.Manifest, error) {
	target = strings.Trim(target, "/")
	if name, ok := strings.CutPrefix(target, strings.TrimSuffix(storage.DatasetsPrefix, "/")+"/"); ok {
		m, err := storage.ReadDataset(ctx, store, name)
		if errors.Is(err, storage.ErrNotFound) {
			return nil, usagef("no committed dataset %q in %s", name, store.URL())
		}
		return m, err
	}
	run, folder, ok := strings.Cut(strings.TrimPrefix(target, "runs/"), "/")
	folder = strings.TrimPrefix(folder, "stages/")
	if !ok || folder == "" {
		return nil, usagef("show %q: expected RUN/STAGE (e.g. chess-whale/r003-w02-rollout), datasets/NAME or a .parquet file", target)
	}
	f, err := storage.ParseFolder(folder)
	if err != nil {
		return nil, usageError{fmt.Errorf("show %q: %w", target, err)}
	}
	var m *storage.Manifest
	if strings.Contains(folder, ".a") {
		m, err = storage.ReadManifest(ctx, store, f.Key(run))
	} else {
		m, err = storage.LatestCommitted(ctx, store, run, f.Position, f.Stage)
	}
	if errors.Is(err, storage.ErrNotFound) {
		return nil, usagef("no committed stage %s in run %s at %s (whale ls %s lists them)", folder, run, store.URL(), run)
	}
	return m, err
}

func printManifest(out io.Writer, m *storage.Manifest) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	kind := "stage"
	if strings.HasPrefix(m.Dir, storage.DatasetsPrefix) {
		kind = "dataset"
	}
	fmt.Fprintf(tw, "%s\t%s\n", kind, m.Dir)
	if m.Run != "" {
		fmt.Fprintf(tw, "run\t%s\n", m.Run)
	}
	fmt.Fprintf(tw, "position / stage\t%s / %s (attempt %d, %d shard(s))\n", m.Position, m.Stage, m.Attempt, m.Shards)
	fmt.Fprintf(tw, "manifest\t%s\n", m.Digest)
	fmt.Fprintf(tw, "input digest\t%s\n", m.InputDigest)
	fmt.Fprintf(tw, "config\t%s %s\n", m.ConfigDigest, cell(string(m.Config), 120))
	fmt.Fprintf(tw, "seed\t%d\n", m.Seed)
	for _, in := range m.Inputs {
		fmt.Fprintf(tw, "input %s\t%s (%s)\n", in.Name, in.Key, in.Digest)
	}
	fmt.Fprintf(tw, "started / finished\t%s / %s (%s)\n", m.Started.Local().Format(time.DateTime),
		m.Finished.Local().Format(time.DateTime), m.Finished.Sub(m.Started).Round(time.Millisecond))
	if m.WhaleVersion != "" {
		fmt.Fprintf(tw, "whale\t%s\n", m.WhaleVersion)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Summary)) {
		b, _ := json.Marshal(m.Summary[k])
		fmt.Fprintf(tw, "summary %s\t%s\n", k, cell(string(b), 120))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nFILE\tTABLE\tSHARD\tROWS\tSIZE\tSHA256")
	for _, f := range m.Files {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", f.Name, f.Table, f.Shard, f.Rows, humanBytes(f.Size), cell(f.SHA256, 19))
	}
	tw.Flush()
}

// ---- status

type statusOptions struct {
	Root string
	Run  string
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show a run: its frozen spec, who holds its lease, its committed stages and its datasets",
		ArgsUsage: "RUN",
		Flags:     []cli.Flag{rootFlag()},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 1 {
				return usagef("status takes one run name, got %d arguments", len(args))
			}
			return runStatus(c.Context, statusOptions{Root: c.String("root"), Run: args[0]}, c.App.Writer)
		}),
	}
}

func runStatus(ctx context.Context, o statusOptions, out io.Writer) error {
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	run, err := readRun(ctx, store, o.Run)
	if err != nil {
		return err
	}
	sp := run.Spec
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\t%s\n", sp.Name, sp.Description)
	fmt.Fprintf(tw, "spec\t%s (whale %s, created %s)\n", run.SpecDigest, run.WhaleVersion, run.Created.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "domain / schedule\t%s / %s\n", sp.Domain, sp.Schedule)
	fmt.Fprintf(tw, "model\t%s\n", cmp.Or(sp.Model.Name, "-"))
	rec, ok, err := storage.ReadLease(ctx, store, leaseFolder(o.Run))
	switch {
	case err != nil:
		fmt.Fprintf(tw, "lease\tunreadable: %v\n", err)
	case !ok:
		fmt.Fprintf(tw, "lease\tfree (never taken)\n")
	case rec.Live(time.Now()):
		fmt.Fprintf(tw, "lease\theld by %q (host %s, pid %d) until %s\n", rec.Holder, rec.Host, rec.PID, rec.Expires.Local().Format(time.DateTime))
	case rec.Released:
		fmt.Fprintf(tw, "lease\tfree (released by %q)\n", rec.Holder)
	default:
		fmt.Fprintf(tw, "lease\tfree (expired %s, held by %q)\n", rec.Expires.Local().Format(time.DateTime), rec.Holder)
	}
	for _, d := range []struct{ role, ref string }{{"train", sp.Data.Train}, {"search", sp.Data.Search}, {"test", sp.Data.Test}} {
		if d.ref == "" {
			continue
		}
		state := "not imported"
		if name, ok := strings.CutPrefix(d.ref, storage.DatasetsPrefix); ok {
			if m, err := storage.ReadDataset(ctx, store, name); err == nil {
				state = tableRows(m)
			} else if !errors.Is(err, storage.ErrNotFound) {
				state = err.Error()
			}
		} else {
			state = "outside the bucket's datasets/"
		}
		fmt.Fprintf(tw, "data %s\t%s: %s\n", d.role, d.ref, state)
	}
	ms, err := storage.ListCommitted(ctx, store, o.Run)
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "committed stages\t%d\n", len(ms))
	if len(ms) > 0 {
		last := slices.MaxFunc(ms, func(a, b *storage.Manifest) int { return a.Finished.Compare(b.Finished) })
		fmt.Fprintf(tw, "last\t%s (%s), %s\n", last.Folder(), tableRows(last), last.Finished.Local().Format(time.DateTime))
	}
	printSlurmJobs(ctx, store, o.Run, tw)
	return tw.Flush()
}
