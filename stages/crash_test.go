package stages

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

const crashEnv = "WHALE_STAGES_CRASH_CHILD"

// slowLines writes Files files of Rows rows each, sleeping Delay per row,
// and says on stdout when each file has been uploaded.
type slowLines struct {
	files, rows int
	delay       time.Duration
	progress    func(file int)
}

func (*slowLines) Name() string { return "slow" }

func (l *slowLines) Run(ctx context.Context, x *Exec) error {
	for f := range l.files {
		w, err := x.Create(ctx, "lines.txt")
		if err != nil {
			return err
		}
		for r := range l.rows {
			fmt.Fprintf(w, "row %d %d\n", f, r)
			if l.delay > 0 {
				time.Sleep(l.delay)
			}
		}
		w.SetRows(int64(l.rows))
		if err := w.Close(); err != nil {
			return err
		}
		if l.progress != nil {
			l.progress(f)
		}
	}
	x.SetSummary("files", l.files)
	return nil
}

func crashSpec() Spec {
	return Spec{Run: "crash", Position: "r001-w01", Config: map[string]any{"files": 4, "rows": 50}, Seed: 3, Log: quiet}
}

// crashChild is the child side of TestCrashRecovery (see TestMain): it
// runs the slow stage against root until it is killed.
func crashChild(root string) {
	s, err := storage.Open(context.Background(), root, &storage.Options{TempDir: os.Getenv(crashEnv + "_TMP")})
	if err != nil {
		fmt.Println("CRASH-ERROR", err)
		os.Exit(2)
	}
	st := &slowLines{files: 4, rows: 50, delay: 20 * time.Millisecond, progress: func(f int) {
		fmt.Printf("CRASH-UPLOADED %d\n", f)
	}}
	_, err = Execute(context.Background(), s, crashSpec(), st)
	fmt.Println("CRASH-DONE", err)
	os.Exit(0)
}

// TestCrashRecovery kills a child process in the middle of a stage (after
// its first file reached the store), checks that nothing is visible, then
// reruns the stage: the rerun commits complete files only.
func TestCrashRecovery(t *testing.T) {
	t.Run("file", func(t *testing.T) { crashRecovery(t, "file://"+t.TempDir()) })
	t.Run("s3", func(t *testing.T) { crashRecovery(t, s3test.NewBucketURL(t)) })
}

func crashRecovery(t *testing.T, root string) {
	ctx := context.Background()
	spool := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashEnv+"="+root, crashEnv+"_TMP="+spool)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "CRASH-UPLOADED 0") {
				// One file is in the store and the next is half spooled.
				time.Sleep(100 * time.Millisecond)
				cmd.Process.Signal(syscall.SIGKILL)
			}
			if strings.HasPrefix(line, "CRASH-DONE") || strings.HasPrefix(line, "CRASH-ERROR") {
				t.Errorf("child finished before it was killed: %s", line)
			}
		}
	}()
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child made no progress in 60s")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}

	s := openStore(t, root)
	dir := storage.StagesPrefix("crash") + "r001-w01-slow"
	var keys []string
	s.List(ctx, dir+"/", false, func(e storage.Entry) error { keys = append(keys, e.Key); return nil })
	var uploaded []string
	for _, k := range keys {
		if strings.Contains(k, "/lines-") {
			uploaded = append(uploaded, k)
		}
		if strings.HasSuffix(k, storage.ManifestName) || strings.Contains(k, storage.PartsDir+"/") {
			t.Fatalf("the killed shard committed something: %s", k)
		}
	}
	if len(uploaded) != 1 {
		t.Fatalf("want exactly the first file uploaded before the kill, found %v", keys)
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Fatalf("the killed child left %d spool file(s) behind", len(ents))
	}
	if _, err := storage.LatestCommitted(ctx, s, "crash", "r001-w01", "slow"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("LatestCommitted after the crash: %v", err)
	}
	if ms, err := storage.ListCommitted(ctx, s, "crash"); err != nil || len(ms) != 0 {
		t.Fatalf("ListCommitted after the crash: %d, %v", len(ms), err)
	}

	// The rerun resumes the same attempt and commits complete files.
	res, err := Execute(ctx, s, crashSpec(), &slowLines{files: 4, rows: 50})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CommittedHere || res.Attempt != 1 {
		t.Fatalf("rerun: %+v", res)
	}
	m := res.Manifest
	if len(m.Files) != 4 || m.Rows("lines") != 200 {
		t.Fatalf("manifest files %+v", m.Files)
	}
	for _, f := range m.Files {
		if dir+"/"+f.Name == uploaded[0] {
			t.Fatalf("manifest names the killed try's file %s", f.Name)
		}
		data, err := readAll(ctx, s, m, f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(data, "\n"); int64(n) != f.Rows || storage.DigestBytes([]byte(data)) != f.SHA256 {
			t.Fatalf("%s: %d lines, manifest says %d rows", f.Name, n, f.Rows)
		}
	}
	if err := storage.Verify(ctx, s, m, true); err != nil {
		t.Fatal(err)
	}
	g, err := storage.Garbage(ctx, s, "crash", -time.Hour)
	if err != nil || len(g) != 1 || g[0].Key != uploaded[0] {
		t.Fatalf("garbage = %+v, %v; want the killed try's file %s", g, err, uploaded[0])
	}
}
