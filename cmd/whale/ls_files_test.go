package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// duckdbPaths reads back the file list of the CREATE VIEW that
// `ls --format duckdb` prints, with DuckDB's string literal rules (two
// single quotes are one; nothing else is special), and checks the
// statement around it.
func duckdbPaths(t *testing.T, sql, view string) []string {
	t.Helper()
	head := "CREATE OR REPLACE VIEW " + view + " AS SELECT * FROM read_parquet([\n"
	_, rest, ok := strings.Cut(sql, head)
	if !ok {
		t.Fatalf("no %q in\n%s", head, sql)
	}
	var paths []string
	for {
		rest = strings.TrimLeft(rest, " \n,")
		if !strings.HasPrefix(rest, "'") {
			break
		}
		var b strings.Builder
		i := 1
		for {
			if i >= len(rest) {
				t.Fatalf("unterminated string literal in\n%s", sql)
			}
			if rest[i] == '\'' {
				if i+1 < len(rest) && rest[i+1] == '\'' {
					b.WriteByte('\'')
					i += 2
					continue
				}
				break
			}
			b.WriteByte(rest[i])
			i++
		}
		paths = append(paths, b.String())
		rest = rest[i+1:]
	}
	if rest != "], union_by_name = true);\n" {
		t.Fatalf("the statement ends in %q, not the list's end and union_by_name", rest)
	}
	return paths
}

// readRows counts the rows of a rollouts file as whale's reader reads it.
func readRows(t *testing.T, ra io.ReaderAt, size int64) int64 {
	t.Helper()
	var n int64
	err := schemas.ReadRows(context.Background(), ra, size, func(schemas.Rollout) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Outside readers get the newest committed attempt of every stage at
// every position and nothing else: not the attempt --force replaced, not
// a crashed try's file, not an uncommitted attempt. The DuckDB view reads
// the rows `whale analyze` counts.
func TestLsFiles(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()
		whale(t, "init", "--root", r.url, exampleExperiment).mustCode(t, exitOK)
		whale(t, "data", "import", "--root", r.url, "--name", "lichess-train", "--split", "train", puzzlesCSV).mustCode(t, exitOK)
		store := openStore(t, r.url)
		root, err := parseOutsideRoot(store.URL())
		if err != nil {
			t.Fatal(err)
		}

		// No stage yet: nothing to list, and no view of nothing.
		whale(t, "ls", "chess-whale", "--files", "--root", r.url).mustCode(t, exitOK)
		if res := whale(t, "ls", "chess-whale", "--files", "--format", "json", "--root", r.url); strings.TrimSpace(res.stdout) != "[]" {
			t.Errorf("json of no files: %q", res.stdout)
		}
		whale(t, "ls", "chess-whale", "--files", "--format", "duckdb", "--root", r.url).mustCode(t, exitUsage, "no committed rollouts files")

		old := rolloutAt(t, store, "r001-w01", 2, false)
		cur := rolloutAt(t, store, "r001-w01", 3, true)
		w02 := rolloutAt(t, store, "r001-w02", 1, false)
		if cur.Attempt != 2 {
			t.Fatalf("forced rerun wrote attempt %d", cur.Attempt)
		}
		commitStage(t, store, "chess-whale", "r001-h01", fixedRollouts{name: "evaluate", rows: altH})
		eval, err := storage.LatestCommitted(ctx, store, "chess-whale", "r001-h01", "evaluate")
		if err != nil {
			t.Fatal(err)
		}
		// A crashed try's file in the current attempt, and an attempt
		// that never committed.
		stray := cur.Dir + "/rollouts-00000-of-00001.0123456789ab.parquet"
		if err := store.WriteAll(ctx, stray, []byte("a try that lost")); err != nil {
			t.Fatal(err)
		}
		pending := "runs/chess-whale/stages/r001-w03-rollout/rollouts-00000-of-00001.fedcba987654.parquet"
		if err := store.WriteAll(ctx, pending, []byte("no manifest names me")); err != nil {
			t.Fatal(err)
		}

		var want []string // keys, in folder order
		var wantRows int64
		for _, m := range []*storage.Manifest{eval, cur, w02} {
			for _, f := range m.Table("rollouts") {
				want = append(want, m.FileKey(f))
				wantRows += f.Rows
			}
		}
		urls := make([]string, len(want))
		for i, k := range want {
			urls[i] = root.url(k)
		}

		// list: the URLs, flags after the run name.
		ls := whale(t, "ls", "chess-whale", "--files", "--root", r.url)
		ls.mustCode(t, exitOK)
		if got := strings.Fields(ls.stdout); !slices.Equal(got, urls) {
			t.Errorf("ls --files printed\n%s\nwant\n%s", ls.stdout, strings.Join(urls, "\n"))
		}
		for _, bad := range []string{old.Dir + "/", stray, "r001-w03"} {
			if strings.Contains(ls.stdout, bad) {
				t.Errorf("ls --files lists %s:\n%s", bad, ls.stdout)
			}
		}
		if strings.HasPrefix(r.url, "file://") {
			for _, u := range urls {
				p := strings.TrimPrefix(u, "file://")
				if _, err := os.Stat(p); err != nil || !strings.HasPrefix(u, "file:///") {
					t.Errorf("%s is not a local file: %v", u, err)
				}
			}
		} else if !strings.HasPrefix(urls[0], "s3://"+root.bucket+"/runs/chess-whale/stages/") || strings.Contains(ls.stdout, "?") {
			t.Errorf("s3 file URL %s", urls[0])
		}

		// json: where each file comes from.
		js := whale(t, "ls", "chess-whale", "--files", "--format", "json", "--root", r.url)
		js.mustCode(t, exitOK)
		var got []committedFile
		if err := json.Unmarshal([]byte(js.stdout), &got); err != nil {
			t.Fatalf("json: %v\n%s", err, js.stdout)
		}
		if len(got) != len(want) {
			t.Fatalf("json lists %d files, want %d:\n%s", len(got), len(want), js.stdout)
		}
		for i, f := range got {
			if f.File != urls[i] || f.Run != "chess-whale" || f.Table != "rollouts" || f.Size <= 0 || !strings.HasPrefix(f.SHA256, "sha256:") {
				t.Errorf("json file %d: %+v", i, f)
			}
		}
		if g := got[1]; g.Position != "r001-w01" || g.Stage != "rollout" || g.Attempt != 2 || g.Rows != cur.Rows("rollouts") {
			t.Errorf("json entry of the forced rollout: %+v", g)
		}
		if g := got[0]; g.Position != "r001-h01" || g.Stage != "evaluate" || g.Attempt != 1 || g.Rows != int64(len(altH)) {
			t.Errorf("json entry of the evaluation: %+v", g)
		}

		// --stage keeps one stage's files.
		ev := whale(t, "ls", "chess-whale", "--root", r.url, "--files", "--stage", "evaluate")
		ev.mustCode(t, exitOK)
		if got := strings.Fields(ev.stdout); !slices.Equal(got, urls[:1]) {
			t.Errorf("--stage evaluate printed %q, want %q", got, urls[:1])
		}

		// duckdb: a view over exactly those files, whose rows are the
		// episodes whale analyze counts.
		db := whale(t, "ls", "chess-whale", "--files", "--format", "duckdb", "--root", r.url)
		db.mustCode(t, exitOK, "-- The committed rollouts of run chess-whale in "+store.URL(),
			fmt.Sprintf("%d file(s) of 3 stage folder(s), %d rows", len(want), wantRows), "a glob over")
		paths := duckdbPaths(t, db.stdout, `"rollouts"`)
		if len(paths) != len(want) {
			t.Fatalf("the view reads %d files, want %d:\n%s", len(paths), len(want), db.stdout)
		}
		var viewRows int64
		for i, p := range paths {
			if strings.Contains(p, old.Dir+"/") {
				t.Errorf("the view reads the replaced attempt: %s", p)
			}
			if strings.HasPrefix(r.url, "file://") {
				if p != strings.TrimPrefix(urls[i], "file://") {
					t.Errorf("view path %s, want the local path of %s", p, urls[i])
				}
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				viewRows += readRows(t, f, st.Size())
				f.Close()
				continue
			}
			if p != urls[i] {
				t.Errorf("view path %s, want %s", p, urls[i])
			}
			ra, err := store.OpenReaderAt(ctx, strings.TrimPrefix(p, "s3://"+root.bucket+"/"))
			if err != nil {
				t.Fatal(err)
			}
			viewRows += readRows(t, ra, ra.Size())
		}
		an := whale(t, "analyze", "chess-whale", "--root", r.url, "--by", "", "--format", "json")
		an.mustCode(t, exitOK)
		var doc struct {
			Rows int64 `json:"rows"`
		}
		if err := json.Unmarshal([]byte(an.stdout), &doc); err != nil {
			t.Fatal(err)
		}
		if viewRows != doc.Rows || viewRows != wantRows {
			t.Errorf("the view's files hold %d rows; whale analyze counts %d episodes, the manifests %d", viewRows, doc.Rows, wantRows)
		}
		if strings.HasPrefix(r.url, "s3://") {
			// A secret for the bucket with the root's endpoint settings,
			// and never a credential.
			ep := strings.TrimPrefix(strings.Split(strings.Split(r.url, "endpoint=")[1], "&")[0], "http%3A%2F%2F")
			ep = strings.TrimPrefix(ep, "http://")
			for _, w := range []string{"CREATE OR REPLACE SECRET whale_s3_", "TYPE s3, PROVIDER credential_chain",
				"SCOPE 's3://" + root.bucket + "/'", "ENDPOINT '" + ep + "'", "URL_STYLE 'path'", "USE_SSL false", "REGION 'us-east-1'"} {
				if !strings.Contains(db.stdout, w) {
					t.Errorf("the s3 view lacks %q:\n%s", w, db.stdout)
				}
			}
			for _, env := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
				if v := os.Getenv(env); v != "" && strings.Contains(db.stdout+ls.stdout+js.stdout, v) {
					t.Errorf("the output holds the value of %s", env)
				}
			}
		} else if strings.Contains(db.stdout, "SECRET") {
			t.Errorf("a local root's view creates a secret:\n%s", db.stdout)
		}
		whale(t, "ls", "chess-whale", "--files", "--format", "duckdb", "--view", "cw", "--stage", "rollout", "--root", r.url).
			mustCode(t, exitOK, `CREATE OR REPLACE VIEW "cw" AS`, "(rollout stages)")

		// Mistakes say what there is.
		whale(t, "ls", "chess-whale", "--files", "--table", "rollout", "--root", r.url).mustCode(t, exitUsage, "table rollout", "rollouts")
		whale(t, "ls", "chess-whale", "--files", "--stage", "filter", "--root", r.url).mustCode(t, exitUsage, "no committed filter stage", "evaluate, rollout")
		whale(t, "ls", "chess-whale", "--files", "--format", "csv", "--root", r.url).mustCode(t, exitUsage, `"csv"`, "list, json, duckdb")
		whale(t, "ls", "chess-whale", "--files", "--view", "v", "--root", r.url).mustCode(t, exitUsage, "--view")
		whale(t, "ls", "chess-whale", "--stage", "rollout", "--root", r.url).mustCode(t, exitUsage, "--stage goes with --files")
		whale(t, "ls", "--files", "--root", r.url).mustCode(t, exitUsage, "whale ls RUN --files")
		whale(t, "ls", "no-such-run", "--files", "--root", r.url).mustCode(t, exitUsage, "no-such-run")
	})
}

// The SQL quotes what needs quoting, refuses what DuckDB would read as a
// glob, and never prints a credential the root URL held.
func TestDuckDBViewText(t *testing.T) {
	files := []committedFile{{Rows: 2, key: "runs/x/stages/r001-w01-rollout/rollouts-00000-of-00001.abc.parquet"}}
	o := lsOptions{Run: "x", Table: "rollouts", View: `my "view"`}
	view := func(rootURL string) (string, error) {
		var b strings.Builder
		root, err := parseOutsideRoot(redact.URL(rootURL))
		if err != nil {
			return "", err
		}
		err = writeDuckDBView(&b, root, redact.URL(rootURL), o, files)
		return b.String(), err
	}

	sql, err := view("file:///data/it's%20here?prefix=team/a")
	if err != nil {
		t.Fatal(err)
	}
	if got := duckdbPaths(t, sql, `"my ""view"""`); !slices.Equal(got, []string{"/data/it's here/team/a/" + files[0].key}) {
		t.Errorf("paths %q from\n%s", got, sql)
	}

	if _, err := view("file:///data/run[1]"); err == nil || !strings.Contains(err.Error(), "glob") {
		t.Errorf("a root DuckDB reads as a glob: %v", err)
	}
	if _, err := view("mem://x"); err == nil || !strings.Contains(err.Error(), "inside one whale process") {
		t.Errorf("mem root: %v", err)
	}
	// A root whose query redaction had to rewrite: its prefix is unknown.
	for _, root := range []string{"s3://bkt?prefix=a;b&region=x", "s3://bkt?prefix=%2561&region=x", "s3://bkt?region=x&token=abc"} {
		if _, err := view(root); err == nil || !strings.Contains(err.Error(), "cannot say where its files are") {
			t.Errorf("root %s: %v", root, err)
		}
	}

	sql, err = view("s3://AKIAUSER:topsecret@bkt/pre/fix?endpoint=https://AKIAEP:epsecret@minio.example:9000/&region=eu-west-1&s3ForcePathStyle=true&profile=lab")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"topsecret", "epsecret", "AKIA"} {
		if strings.Contains(sql, s) {
			t.Errorf("the SQL holds %q:\n%s", s, sql)
		}
	}
	for _, w := range []string{"CREATE OR REPLACE SECRET whale_s3_bkt (TYPE s3, PROVIDER credential_chain, SCOPE 's3://bkt/pre/fix/', " +
		"ENDPOINT 'minio.example:9000', URL_STYLE 'path', REGION 'eu-west-1', PROFILE 'lab');"} {
		if !strings.Contains(sql, w) {
			t.Errorf("the SQL lacks %q:\n%s", w, sql)
		}
	}
	if got := duckdbPaths(t, sql, `"my ""view"""`); !slices.Equal(got, []string{"s3://bkt/pre/fix/" + files[0].key}) {
		t.Errorf("s3 paths %q", got)
	}

	sql, err = view("azblob://box/p?storage_account=acct")
	if err != nil {
		t.Fatal(err)
	}
	if got := duckdbPaths(t, sql, `"my ""view"""`); !slices.Equal(got, []string{"az://box/p/" + files[0].key}) || !strings.Contains(sql, "ACCOUNT_NAME 'acct'") {
		t.Errorf("azure paths %q in\n%s", got, sql)
	}
}
