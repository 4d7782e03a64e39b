package duckbench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/whalerun/whale/analysis"
)

// With DUCKBENCH_CHILD=duckdb the test binary is a DuckDB process of its
// own: it runs the query on DUCKBENCH_FILE and prints the groups as JSON,
// so that DuckDB's time and memory are measured as whale's are, for a
// whole process.
func TestMain(m *testing.M) {
	if os.Getenv("DUCKBENCH_CHILD") == "duckdb" {
		k, _ := strconv.Atoi(os.Getenv("DUCKBENCH_K"))
		groups, err := duckGroups(context.Background(), os.Getenv("DUCKBENCH_FILE"), strings.Split(os.Getenv("DUCKBENCH_BY"), ","), k)
		if err == nil {
			err = json.NewEncoder(os.Stdout).Encode(groups)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "duckdb:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if fx.dir != "" {
		os.RemoveAll(fx.dir)
	}
	os.Exit(code)
}

// fixture is the generated file and a whale binary built from this tree,
// made once per test binary.
var fx struct {
	once              sync.Once
	dir               string
	file, whale, duck string
	err               error
}

// copyFile copies a program as cp does, 64 KiB a write: written in one
// piece, a file sits in the page cache in large folios, and a process
// running it maps (and counts in its RSS) much more of it.
func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		if _, err := f.Write(data[:n]); err != nil {
			f.Close()
			return err
		}
		data = data[n:]
	}
	return f.Close()
}

func setup(tb testing.TB) {
	tb.Helper()
	fx.once.Do(func() {
		if fx.dir, fx.err = os.MkdirTemp("", "duckbench"); fx.err != nil {
			return
		}
		fx.file = filepath.Join(fx.dir, "rollouts.parquet")
		fx.whale = filepath.Join(fx.dir, "whale")
		start := time.Now()
		if fx.err = WriteFile(fx.file); fx.err != nil {
			return
		}
		tb.Logf("wrote %d rows in %v", Rows, time.Since(start).Round(time.Millisecond))
		// whale as `make build` builds it: from its own module.
		built := fx.whale + ".built"
		build := exec.Command("go", "build", "-o", built, "./cmd/whale")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			fx.err = fmt.Errorf("build whale: %v\n%s", err, out)
			return
		}
		// Both programs run from copies made as cp or an installer makes
		// them: a binary fresh from the linker sits in the page cache in a
		// way that maps up to 40 MB more of it into a process that runs it.
		if fx.err = copyFile(built, fx.whale); fx.err != nil {
			return
		}
		fx.duck = filepath.Join(fx.dir, "duckdb-child")
		fx.err = copyFile(os.Args[0], fx.duck)
	})
	if fx.err != nil {
		tb.Fatal(fx.err)
	}
}

// group is one group of `whale analyze --format json`, or the same
// numbers computed by DuckDB.
type group struct {
	Key                  []string
	Episodes, Tasks      int64
	KMin, KMax           int64
	MeanAtK, PassAtK     float64
	Accuracy, MeanTurns  float64
	MeanPromptTokens     float64
	MeanCompletionTokens float64
	Failed               int64
	FailureRate          float64
}

// duckSQL scores like `whale analyze`: per (group, task) first, then the
// mean over each group's tasks; pass@k is the unbiased estimator
// 1 - C(n-c,k)/C(n,k) through lgamma, with k = n, or min(n, k) for k > 0.
func duckSQL(file string, by []string, k int) string {
	cols := strings.Join(by, ", ")
	return fmt.Sprintf(`
WITH per_task AS (
  SELECT %[1]s, task_id,
         count(*) AS n,
         count(*) FILTER (WHERE correct) AS c,
         avg(reward) AS reward,
         avg(turns) AS turns,
         avg(prompt_tokens) AS prompt,
         avg(completion_tokens) AS completion,
         count(*) FILTER (WHERE coalesce(error, '') <> '') AS failed
  FROM read_parquet('%[2]s')
  GROUP BY %[1]s, task_id
), scored AS (
  SELECT *, CASE WHEN %[3]d = 0 OR n < %[3]d THEN n ELSE %[3]d END AS k FROM per_task
)
SELECT %[1]s,
       sum(n)::BIGINT, count(*)::BIGINT, min(k)::BIGINT, max(k)::BIGINT,
       avg(reward),
       avg(CASE WHEN n - c < k THEN 1.0
                ELSE 1.0 - exp(lgamma(n - c + 1) - lgamma(n - c - k + 1) - lgamma(n + 1) + lgamma(n - k + 1)) END),
       avg(c / n), avg(turns), avg(prompt), avg(completion),
       sum(failed)::BIGINT, sum(failed) / sum(n)
FROM scored
GROUP BY %[1]s
ORDER BY %[1]s`, cols, strings.ReplaceAll(file, "'", "''"), k)
}

func duckGroups(ctx context.Context, file string, by []string, k int) ([]group, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, duckSQL(file, by, k))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []group
	for rows.Next() {
		g := group{Key: make([]string, len(by))}
		dest := make([]any, 0, len(by)+12)
		for i := range g.Key {
			dest = append(dest, &g.Key[i])
		}
		dest = append(dest, &g.Episodes, &g.Tasks, &g.KMin, &g.KMax, &g.MeanAtK, &g.PassAtK, &g.Accuracy,
			&g.MeanTurns, &g.MeanPromptTokens, &g.MeanCompletionTokens, &g.Failed, &g.FailureRate)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// whaleGroups parses `whale analyze --format json`.
func whaleGroups(data []byte, by []string) ([]group, error) {
	var doc struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var out []group
	for _, m := range doc.Groups {
		g := group{}
		for _, d := range by {
			g.Key = append(g.Key, m[d].(string))
		}
		i := func(k string) int64 { return int64(m[k].(float64)) }
		f := func(k string) float64 { return m[k].(float64) }
		g.Episodes, g.Tasks, g.KMin, g.KMax, g.Failed = i("episodes"), i("tasks"), i("k_min"), i("k_max"), i("failed")
		g.MeanAtK, g.PassAtK, g.Accuracy, g.MeanTurns = f("mean_at_k"), f("pass_at_k"), f("accuracy"), f("mean_turns")
		g.MeanPromptTokens, g.MeanCompletionTokens, g.FailureRate = f("mean_prompt_tokens"), f("mean_completion_tokens"), f("failure_rate")
		out = append(out, g)
	}
	return out, nil
}

// run is one process run: its output, wall time and peak memory.
type run struct {
	out  []byte
	wall time.Duration
	// hwm is the peak RSS (VmHWM) of the process and anon the peak of its
	// anonymous part (RssAnon: heap, stacks), in MB, read from /proc
	// while it runs. (The rusage of a child is no use here: Linux counts
	// in it the RSS of the parent it was forked from.)
	hwm, anon float64
	// cpu is the user and system time of the process: under load from
	// other processes it moves less than the wall time does.
	cpu time.Duration
}

func runProcess(tb testing.TB, cmd *exec.Cmd) run {
	tb.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	var r run
	done := make(chan struct{})
	go func() {
		defer close(done)
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			data, err := os.ReadFile(status)
			if err != nil {
				return
			}
			hwm, ok := statusKB(data, "VmHWM:")
			if !ok {
				return // exited
			}
			anon, _ := statusKB(data, "RssAnon:")
			r.hwm, r.anon = max(r.hwm, hwm/1024), max(r.anon, anon/1024)
			time.Sleep(time.Millisecond)
		}
	}()
	err := cmd.Wait()
	r.wall = time.Since(start)
	<-done
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errOut.String())
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.out = out.Bytes()
	return r
}

// statusKB reads a "Name:   123 kB" line of /proc/PID/status.
func statusKB(status []byte, name string) (float64, bool) {
	i := bytes.Index(status, []byte(name))
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(status[i+len(name) : i+len(name)+bytes.IndexByte(status[i+len(name):], '\n')]))
	if len(fields) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return v, err == nil
}

func whaleCmd(by []string, k int, files ...string) *exec.Cmd {
	args := append([]string{"analyze"}, files...)
	args = append(args, "--by", strings.Join(by, ","), "--k", strconv.Itoa(k), "--format", "json")
	return exec.Command(fx.whale, args...)
}

func duckCmd(by []string, k int, file string) *exec.Cmd {
	cmd := exec.Command(fx.duck, "-test.run=^$")
	cmd.Env = append(os.Environ(), "DUCKBENCH_CHILD=duckdb", "DUCKBENCH_FILE="+file,
		"DUCKBENCH_BY="+strings.Join(by, ","), "DUCKBENCH_K="+strconv.Itoa(k))
	return cmd
}

// TestSameNumbers checks that whale analyze prints the numbers DuckDB's SQL
// computes from the same file: counts exactly, means to 1e-9 (the two sum
// in different orders, and DuckDB's pass@k goes through lgamma).
func TestSameNumbers(t *testing.T) {
	setup(t)
	for _, tc := range []struct {
		by []string
		k  int
	}{
		{[]string{"position"}, 0},
		{[]string{"position"}, 4},
		{[]string{"harness_id", "model_id"}, 2},
	} {
		t.Run(fmt.Sprintf("%s,k=%d", strings.Join(tc.by, "+"), tc.k), func(t *testing.T) {
			got, err := whaleGroups(runProcess(t, whaleCmd(tc.by, tc.k, fx.file)).out, tc.by)
			if err != nil {
				t.Fatal(err)
			}
			var want []group
			if err := json.Unmarshal(runProcess(t, duckCmd(tc.by, tc.k, fx.file)).out, &want); err != nil {
				t.Fatal(err)
			}
			compare(t, got, want)
		})
	}
}

func compare(t *testing.T, got, want []group) {
	t.Helper()
	key := func(g group) string { return strings.Join(g.Key, "/") }
	slices.SortFunc(got, func(x, y group) int { return strings.Compare(key(x), key(y)) })
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("whale has %d groups, DuckDB %d", len(got), len(want))
	}
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*max(1, math.Abs(y)) }
	for i := range got {
		g, w := got[i], want[i]
		if key(g) != key(w) || g.Episodes != w.Episodes || g.Tasks != w.Tasks || g.KMin != w.KMin || g.KMax != w.KMax ||
			g.Failed != w.Failed || !near(g.MeanAtK, w.MeanAtK) || !near(g.PassAtK, w.PassAtK) || !near(g.Accuracy, w.Accuracy) ||
			!near(g.MeanTurns, w.MeanTurns) || !near(g.MeanPromptTokens, w.MeanPromptTokens) ||
			!near(g.MeanCompletionTokens, w.MeanCompletionTokens) || !near(g.FailureRate, w.FailureRate) {
			t.Errorf("group %s:\n whale  %+v\n duckdb %+v", key(g), g, w)
		}
	}
	t.Logf("%d groups agree, e.g. %+v", len(got), got[0])
}

// BenchmarkVersus runs the query, grouped by position with mean@k,
// pass@k, turns and tokens, both ways on the same file, alternately so
// that both see the same load, and reports each one's time per run, peak
// RSS and the ratio whale/DuckDB. "process" runs `whale analyze` and a
// DuckDB process of its own; "inproc" runs package analysis and DuckDB's
// Go bindings in this process, without process start-up.
func BenchmarkVersus(b *testing.B) {
	setup(b)
	by := []string{"position"}
	b.Run("process", func(b *testing.B) {
		var w, d time.Duration
		var wm, dm run
		for b.Loop() {
			rw := runProcess(b, whaleCmd(by, 0, fx.file))
			rd := runProcess(b, duckCmd(by, 0, fx.file))
			w, d = w+rw.wall, d+rd.wall
			wm.hwm, wm.anon, wm.cpu = max(wm.hwm, rw.hwm), max(wm.anon, rw.anon), wm.cpu+rw.cpu
			dm.hwm, dm.anon, dm.cpu = max(dm.hwm, rd.hwm), max(dm.anon, rd.anon), dm.cpu+rd.cpu
		}
		report(b, w, d)
		b.ReportMetric(wm.cpu.Seconds()*1000/float64(b.N), "whale-cpu-ms")
		b.ReportMetric(dm.cpu.Seconds()*1000/float64(b.N), "duckdb-cpu-ms")
		b.ReportMetric(wm.hwm, "whale-rss-MB")
		b.ReportMetric(wm.anon, "whale-anon-MB")
		b.ReportMetric(dm.hwm, "duckdb-rss-MB")
		b.ReportMetric(dm.anon, "duckdb-anon-MB")
	})
	b.Run("inproc", func(b *testing.B) {
		ctx := context.Background()
		var w, d, wc, dc time.Duration
		for b.Loop() {
			start, startCPU := time.Now(), cpuTime()
			a, err := analysis.New(analysis.Options{By: by})
			if err != nil {
				b.Fatal(err)
			}
			f, err := os.Open(fx.file)
			if err != nil {
				b.Fatal(err)
			}
			st, _ := f.Stat()
			if err := a.AddFile(ctx, fx.file, f, st.Size(), analysis.Labels{}); err != nil {
				b.Fatal(err)
			}
			f.Close()
			if r := a.Result(); r.Rows != Rows {
				b.Fatalf("whale read %d rows", r.Rows)
			}
			mid, midCPU := time.Now(), cpuTime()
			if _, err := duckGroups(ctx, fx.file, by, 0); err != nil {
				b.Fatal(err)
			}
			w, d = w+mid.Sub(start), d+time.Since(mid)
			wc, dc = wc+midCPU-startCPU, dc+cpuTime()-midCPU
		}
		report(b, w, d)
		b.ReportMetric(wc.Seconds()*1000/float64(b.N), "whale-cpu-ms")
		b.ReportMetric(dc.Seconds()*1000/float64(b.N), "duckdb-cpu-ms")
	})
}

// cpuTime is the user and system time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, whale, duck time.Duration) {
	n := float64(b.N)
	b.ReportMetric(whale.Seconds()*1000/n, "whale-ms")
	b.ReportMetric(duck.Seconds()*1000/n, "duckdb-ms")
	b.ReportMetric(whale.Seconds()/duck.Seconds(), "whale/duckdb")
}

// BenchmarkWhaleMemory runs `whale analyze` on the file once and on four
// copies of it (4M rows, the same groups and tasks): the peak RSS must
// not grow with the rows.
func BenchmarkWhaleMemory(b *testing.B) {
	setup(b)
	copies := []string{fx.file}
	for i := range 3 {
		p := filepath.Join(fx.dir, fmt.Sprintf("copy%d.parquet", i))
		if _, err := os.Stat(p); err != nil {
			if err := os.Link(fx.file, p); err != nil {
				b.Fatal(err)
			}
		}
		copies = append(copies, p)
	}
	by := []string{"position"}
	var rss, anon [2]float64
	var wall [2]time.Duration
	for b.Loop() {
		for i, files := range [][]string{copies[:1], copies} {
			r := runProcess(b, whaleCmd(by, 0, files...))
			rss[i], anon[i], wall[i] = max(rss[i], r.hwm), max(anon[i], r.anon), wall[i]+r.wall
		}
	}
	b.ReportMetric(rss[0], "1M-rss-MB")
	b.ReportMetric(anon[0], "1M-anon-MB")
	b.ReportMetric(rss[1], "4M-rss-MB")
	b.ReportMetric(anon[1], "4M-anon-MB")
	b.ReportMetric(wall[0].Seconds()*1000/float64(b.N), "1M-ms")
	b.ReportMetric(wall[1].Seconds()*1000/float64(b.N), "4M-ms")
	// The binary's own pages make RSS noisy by ±10 MB; the anonymous
	// part (heap) is what must not grow with rows.
	if anon[1] > anon[0]+16 {
		b.Errorf("peak anonymous RSS grew from %.0f MB for 1M rows to %.0f MB for 4M", anon[0], anon[1])
	}
}
