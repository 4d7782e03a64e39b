package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/storage"
)

// `whale ls RUN --files`: the committed files of a run, for readers
// outside whale. A glob over the bucket (runs/*/stages/*/rollouts-*.parquet)
// also matches the files of attempts that `whale stage --force` replaced
// and the leftovers of crashed tries; these lists hold only what the
// newest committed attempt of each stage at each position names in its
// _MANIFEST.json, as storage.ListCommitted reads it.

// Output formats of ls --files.
const (
	filesList   = "list"   // one URL a line
	filesJSON   = "json"   // an array of committedFile
	filesDuckDB = "duckdb" // a CREATE VIEW statement over read_parquet
)

var filesFormats = []string{filesList, filesJSON, filesDuckDB}

// defaultFilesTable is the table ls --files lists unless told another.
const defaultFilesTable = "rollouts"

// committedFile is one line of ls --files.
type committedFile struct {
	File     string `json:"file"` // the URL: file:///abs/path or <scheme>://bucket/prefix/key
	Run      string `json:"run"`
	Position string `json:"position"`
	Stage    string `json:"stage"`
	Attempt  int    `json:"attempt"`
	Table    string `json:"table"`
	Shard    int    `json:"shard"`
	Rows     int64  `json:"rows"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`

	key string // relative to the root
}

// listFiles prints the committed files of o.Run's table o.Table (of stage
// o.Stage, if set) in o.Format.
func listFiles(ctx context.Context, store *storage.Store, o lsOptions, out io.Writer) error {
	if !slices.Contains(filesFormats, o.Format) {
		return usagef("--format: %q is not one of %s", o.Format, strings.Join(filesFormats, ", "))
	}
	if o.Table == "" {
		return usagef("--table: give a table name, e.g. %s", defaultFilesTable)
	}
	if o.View != "" && o.Format != filesDuckDB {
		return usagef("--view names the view of --format %s", filesDuckDB)
	}
	// The root's redacted URL: nothing printed from it can carry a
	// credential.
	root, err := parseOutsideRoot(store.URL())
	if err != nil {
		return usageError{err}
	}
	if _, err := readRun(ctx, store, o.Run); err != nil {
		return err
	}
	ms, err := storage.ListCommitted(ctx, store, o.Run)
	if err != nil {
		return err
	}
	var files []committedFile
	tables, stagesSeen := map[string]bool{}, map[string]bool{}
	for _, m := range ms {
		stagesSeen[m.Stage] = true
		if o.Stage != "" && m.Stage != o.Stage {
			continue
		}
		for _, f := range m.Files {
			tables[f.Table] = true
			if f.Table != o.Table {
				continue
			}
			key := m.FileKey(f)
			files = append(files, committedFile{File: root.url(key), Run: m.Run, Position: m.Position, Stage: m.Stage,
				Attempt: m.Attempt, Table: f.Table, Shard: f.Shard, Rows: f.Rows, Size: f.Size, SHA256: f.SHA256, key: key})
		}
	}
	// A stage or table no committed stage has is a typo more likely than
	// an empty answer; a run with no stages yet is simply empty.
	if o.Stage != "" && len(stagesSeen) > 0 && !stagesSeen[o.Stage] {
		return usagef("run %s has no committed %s stage; its stages are %s", o.Run, o.Stage, strings.Join(slices.Sorted(maps.Keys(stagesSeen)), ", "))
	}
	if len(tables) > 0 && !tables[o.Table] {
		return usagef("no committed %s in run %s has a table %s; they have %s", stageWord(o.Stage), o.Run, o.Table, strings.Join(slices.Sorted(maps.Keys(tables)), ", "))
	}
	switch o.Format {
	case filesJSON:
		if files == nil {
			files = []committedFile{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(files)
	case filesDuckDB:
		if len(files) == 0 {
			return usagef("run %s has no committed %s files yet (whale ls %s lists its stages); DuckDB cannot make a view of none", o.Run, o.Table, o.Run)
		}
		return writeDuckDBView(out, root, store.URL(), o, files)
	default:
		for _, f := range files {
			fmt.Fprintln(out, f.File)
		}
		return nil
	}
}

// stageWord is "stage", or "rollout stage" when stage is "rollout".
func stageWord(stage string) string {
	if stage == "" {
		return "stage"
	}
	return stage + " stage"
}

// outsideRoot is how readers outside whale address the objects of a
// root. It follows storage.Open's reading of the URL: a file:// path is
// the directory of the keys; an object store's URL path and its "prefix"
// parameter scope the keys; the other parameters configure the
// connection and are never part of an object's address.
type outsideRoot struct {
	scheme string     // file, s3, gs or azblob
	dir    string     // file: the local directory that holds the keys
	bucket string     // object stores: the bucket or container
	prefix string     // object stores: the key prefix, "" or ending in "/"
	query  url.Values // object stores: the connection settings
}

// parseOutsideRoot reads a root URL, which should be redacted (see
// storage.Store.URL).
func parseOutsideRoot(redacted string) (*outsideRoot, error) {
	u, err := url.Parse(redacted)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", redacted, err)
	}
	// Redaction rewrote a part of the root that addresses depend on (a
	// query that does not parse strictly, a value encoded twice, a path):
	// the addresses built from it would point elsewhere. (User info is
	// dropped anyway.)
	rewritten := redacted == redact.Unparseable || strings.Contains(u.Host, redact.Mark) || strings.Contains(u.Path, redact.Mark)
	for k, vs := range u.Query() {
		rewritten = rewritten || k == redact.Mark || slices.Contains(vs, redact.Mark)
	}
	if rewritten {
		return nil, fmt.Errorf("root %s: whale cannot say where its files are for readers outside whale; write the root URL without secrets and with a plain query", redacted)
	}
	q := u.Query()
	prefix := strings.Trim(q.Get("prefix"), "/")
	q.Del("prefix")
	r := &outsideRoot{scheme: u.Scheme, query: q}
	switch u.Scheme {
	case "file":
		r.dir = u.Path
		if prefix != "" {
			r.dir = path.Join(r.dir, prefix)
		}
		return r, nil
	case "s3", "gs", "azblob":
		r.bucket = u.Host
		if p := strings.Trim(strings.Trim(u.Path, "/")+"/"+prefix, "/"); p != "" {
			r.prefix = p + "/"
		}
		return r, nil
	case "mem":
		return nil, fmt.Errorf("%s lives inside one whale process: readers outside whale cannot open its files", redacted)
	}
	return nil, fmt.Errorf("root %s: readers outside whale cannot be told where %s:// files are", redacted, u.Scheme)
}

// url is the address of key in the root's own scheme: file:///abs/path,
// s3://bucket/prefix/key, gs://…, azblob://container/prefix/key.
func (r *outsideRoot) url(key string) string {
	if r.scheme == "file" {
		return (&url.URL{Scheme: "file", Path: path.Join(r.dir, key)}).String()
	}
	return r.scheme + "://" + r.bucket + "/" + r.prefix + key
}

// duckdbPath is how DuckDB names key: a local path for file:// roots
// (DuckDB reads paths, not file URLs), s3:// and gs:// URLs as they are
// (httpfs), and az://container/… for Azure (the azure extension).
func (r *outsideRoot) duckdbPath(key string) string {
	switch r.scheme {
	case "file":
		return path.Join(r.dir, key)
	case "azblob":
		return "az://" + r.bucket + "/" + r.prefix + key
	}
	return r.url(key)
}

// sqlString is s as a SQL string literal: single quotes doubled, nothing
// else special (DuckDB's '…' strings have no backslash escapes).
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sqlIdent is s as a quoted SQL identifier.
func sqlIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// duckdbGlob are the characters that make DuckDB read a path as a glob
// pattern; there is no way to escape them.
const duckdbGlob = "*?["

// writeDuckDBView writes SQL that DuckDB runs as it is: for s3:// roots a
// secret that takes credentials from the AWS credential chain (whale never
// prints one), then a view over exactly the committed files.
// union_by_name lets files of older schema versions, which lack the
// newer columns, read with NULL there.
func writeDuckDBView(w io.Writer, root *outsideRoot, rootURL string, o lsOptions, files []committedFile) error {
	var rows int64
	folders := map[string]bool{}
	paths := make([]string, len(files))
	for i, f := range files {
		rows += f.Rows
		folders[path.Dir(f.key)] = true
		paths[i] = root.duckdbPath(f.key)
		if strings.ContainsAny(paths[i], duckdbGlob) {
			return usagef("DuckDB would read %s as a glob pattern (it has one of %s) and cannot be told otherwise; "+
				"use --format list, or a root whose path has none of these characters", paths[i], duckdbGlob)
		}
		if !strings.HasSuffix(f.key, ".parquet") {
			return usagef("table %s of run %s is not Parquet (%s): DuckDB's read_parquet cannot read it", o.Table, o.Run, f.key)
		}
	}
	view := o.View
	if view == "" {
		view = o.Table
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- The committed %s of run %s", o.Table, o.Run)
	if o.Stage != "" {
		fmt.Fprintf(&b, " (%s stages)", o.Stage)
	}
	fmt.Fprintf(&b, " in %s:\n", rootURL)
	fmt.Fprintf(&b, "-- %d file(s) of %d stage folder(s), %d rows, as `whale ls %s --files` lists them. Files of\n", len(files), len(folders), rows, o.Run)
	b.WriteString("-- attempts replaced by --force and leftovers of crashed tries are not here; a glob over\n")
	b.WriteString("-- the bucket would read them too.\n")
	switch root.scheme {
	case "s3":
		b.WriteString("-- s3:// needs DuckDB's httpfs and aws extensions (autoloaded) and credentials, which\n")
		b.WriteString("-- whale never prints: this secret takes them from the AWS credential chain\n")
		b.WriteString("-- (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws, an instance role).\n")
		b.WriteString(s3Secret(root))
	case "gs":
		b.WriteString("-- gs:// needs DuckDB's httpfs extension and a GCS secret with HMAC keys, which whale\n")
		b.WriteString("-- never prints: CREATE SECRET (TYPE gcs, KEY_ID '...', SECRET '...');\n")
	case "azblob":
		account := cmp.Or(root.query.Get("storage_account"), "...")
		b.WriteString("-- az:// needs DuckDB's azure extension and a secret; whale prints no credentials:\n")
		fmt.Fprintf(&b, "-- CREATE SECRET (TYPE azure, PROVIDER credential_chain, ACCOUNT_NAME %s);\n", sqlString(account))
	}
	fmt.Fprintf(&b, "CREATE OR REPLACE VIEW %s AS SELECT * FROM read_parquet([\n", sqlIdent(view))
	for i, p := range paths {
		sep := ","
		if i == len(paths)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "  %s%s\n", sqlString(p), sep)
	}
	b.WriteString("], union_by_name = true);\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// s3Secret is a DuckDB secret for the root's bucket, scoped to its
// prefix, with the connection settings of the root URL: endpoint, URL
// style, TLS, region and profile. Credentials come from the chain.
func s3Secret(r *outsideRoot) string {
	q := r.query
	param := func(names ...string) string {
		for _, n := range names {
			for k, vs := range q {
				if strings.EqualFold(k, n) && len(vs) > 0 {
					return vs[0]
				}
			}
		}
		return ""
	}
	isTrue := func(v string) bool { return strings.EqualFold(v, "true") || v == "1" }
	opts := []string{"TYPE s3", "PROVIDER credential_chain", "SCOPE " + sqlString("s3://"+r.bucket+"/"+r.prefix)}
	useSSL := !isTrue(param("disable_https"))
	if ep := param("endpoint"); ep != "" {
		// DuckDB wants host[:port]; never the user info, whatever the
		// URL held.
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
			if u.Scheme == "http" {
				useSSL = false
			}
		} else {
			host, _, _ = strings.Cut(host[strings.LastIndex(host, "@")+1:], "/")
		}
		opts = append(opts, "ENDPOINT "+sqlString(host))
	}
	if isTrue(param("use_path_style", "s3ForcePathStyle")) {
		opts = append(opts, "URL_STYLE 'path'")
	}
	if !useSSL {
		opts = append(opts, "USE_SSL false")
	}
	if region := param("region"); region != "" {
		opts = append(opts, "REGION "+sqlString(region))
	}
	if profile := param("profile"); profile != "" {
		opts = append(opts, "PROFILE "+sqlString(profile))
	}
	name := "whale_s3_" + strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			return c
		}
		return '_'
	}, strings.ToLower(r.bucket))
	return fmt.Sprintf("CREATE OR REPLACE SECRET %s (%s);\n", name, strings.Join(opts, ", "))
}
