package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Partition is the cluster's only partition, the default one.
const Partition = "debug"

// Cluster is the running test cluster.
type Cluster struct {
	// Dir holds the cluster's files; Conf is its slurm.conf.
	Dir  string
	Conf string
	// Node is the one node's name (`hostname -s`).
	Node string
	// Install is how long installing the packages took in this process
	// (0 when they were there); Start how long starting the daemons took
	// (0 when this process joined a running cluster).
	Install time.Duration
	Start   time.Duration
}

// Env is the environment a Slurm command needs to talk to this cluster.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Logs returns the last lines of the daemons' logs, for failure messages.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log", "munged.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, f))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// info is cluster/info.json, how joiners find the cluster.
type info struct {
	Conf     string `json:"conf"`
	Node     string `json:"node"`
	PIDs     []int  `json:"pids"` // munged, slurmctld, slurmd
	Watchdog int    `json:"watchdog_pid"`
}

// errSkip marks conditions under which a test outside CI is skipped.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

var shared struct {
	mu       sync.Mutex
	mainRuns bool // Main was called: the process drops inuse at the end
	cluster  *Cluster
	err      error
	inuse    *os.File // holds the shared lock while this process uses the cluster
}

// watchdogEnv, set to the cluster's folder, makes Main act as the
// cluster's watchdog instead of running tests.
const watchdogEnv = "WHALE_SLURMTEST_WATCHDOG"

func ci() bool { return os.Getenv("CI") == "true" }

// Shared returns the cluster, starting or joining it on first use, and
// points the process's Slurm environment at it: SLURM_CONF is set, and
// SBATCH_*, SQUEUE_* and other SLURM_* variables of the developer's shell
// (or of an enclosing Slurm job) are removed.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test against a real Slurm: skipped in -short mode")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.mainRuns {
		t.Fatal("slurmtest: call slurmtest.Main(m) from TestMain: it releases the cluster when the tests end")
	}
	if shared.cluster == nil && shared.err == nil {
		shared.cluster, shared.err = acquire()
		if shared.err == nil {
			c := shared.cluster
			for _, kv := range os.Environ() {
				k, _, _ := strings.Cut(kv, "=")
				if strings.HasPrefix(k, "SBATCH_") || strings.HasPrefix(k, "SQUEUE_") || strings.HasPrefix(k, "SCONTROL_") || strings.HasPrefix(k, "SLURM_") {
					os.Unsetenv(k)
				}
			}
			os.Setenv("SLURM_CONF", c.Conf)
			t.Logf("slurmtest: cluster %s (node %s); install %s, start %s", c.Dir, c.Node, c.Install.Round(time.Millisecond), c.Start.Round(time.Millisecond))
		}
	}
	if err := shared.err; err != nil {
		if skips(err) {
			t.Skip("slurmtest: " + err.Error())
		}
		t.Fatalf("slurmtest: %v", err)
	}
	return shared.cluster
}

// Main runs the tests and then leaves the cluster; the cluster's watchdog
// stops it once no process uses it. Call it from TestMain.
func Main(m *testing.M) {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		// This is a test binary started again as a cluster's watchdog.
		os.Exit(watchdog(dir))
	}
	shared.mu.Lock()
	shared.mainRuns = true
	shared.mu.Unlock()
	code := m.Run()
	release()
	os.Exit(code)
}

func baseDir() string { return filepath.Join(os.TempDir(), "whale-slurmtest") }

// lockBase takes the exclusive state lock; the returned func drops it.
func lockBase() (func(), error) {
	base := baseDir()
	if err := os.MkdirAll(base, 0o711); err != nil {
		return nil, err
	}
	// munged refuses a socket below a folder others cannot traverse.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func openInuse() (*os.File, error) {
	return os.OpenFile(filepath.Join(baseDir(), "inuse"), os.O_CREATE|os.O_RDWR, 0o600)
}

func acquire() (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errSkip{"the Slurm daemons run as root here; run the tests as root"}
	}
	unlock, err := lockBase()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", baseDir(), err)
	}
	defer unlock()
	var install time.Duration
	if missing := missingBinaries(); len(missing) > 0 {
		if err := mayInstall(missing); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := installPackages(); err != nil {
			return nil, err
		}
		install = time.Since(t0)
		if missing := missingBinaries(); len(missing) > 0 {
			return nil, fmt.Errorf("still missing after apt-get install: %s", strings.Join(missing, ", "))
		}
	}
	// Use before looking: a watchdog tearing the cluster down holds inuse
	// exclusively, so this waits until it is done. (The watchdog never
	// takes the base lock, so this cannot deadlock.)
	inuse, err := openInuse()
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(inuse.Fd()), syscall.LOCK_SH); err != nil {
		inuse.Close()
		return nil, fmt.Errorf("flock %s: %w", inuse.Name(), err)
	}
	dir := filepath.Join(baseDir(), "cluster")
	c, err := join(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Info("slurmtest: replacing a broken test cluster", "dir", dir, "why", err)
		}
		t0 := time.Now()
		c, err = start(dir)
		if err != nil {
			inuse.Close()
			return nil, err
		}
		c.Start = time.Since(t0)
	}
	c.Install = install
	shared.inuse = inuse
	return c, nil
}

// join returns the running cluster, or why there is none to join.
func join(dir string) (*Cluster, error) {
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		return nil, err
	}
	var in info
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("read %s/info.json: %w", dir, err)
	}
	for _, pid := range append([]int{in.Watchdog}, in.PIDs...) {
		if pid <= 0 || syscall.Kill(pid, 0) != nil || zombie(pid) {
			return nil, fmt.Errorf("its process %d is gone", pid)
		}
	}
	c := &Cluster{Dir: dir, Conf: in.Conf, Node: in.Node}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitIdle(ctx, c.Env(), c.Node); err != nil {
		return nil, err
	}
	return c, nil
}

// binaries the cluster needs, with the package that brings each.
var binaries = []string{"munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	// root's PATH usually has sbin, a CI shell's may not.
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func missingBinaries() []string {
	var missing []string
	for _, b := range binaries {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	return missing
}

// mayInstall says whether missing binaries may be installed: under CI or
// when asked to; otherwise the tests skip, saying what to install.
func mayInstall(missing []string) error {
	if ci() || os.Getenv("WHALE_SLURM_INSTALL") == "1" {
		return nil
	}
	return errSkip{fmt.Sprintf("%s not installed (apt-get install -y slurm-wlm munge, or set WHALE_SLURM_INSTALL=1 to let the tests install them)", strings.Join(missing, ", "))}
}

// skips reports whether err skips a test instead of failing it: only
// outside CI, and only for a missing prerequisite.
func skips(err error) bool {
	var skip errSkip
	return errors.As(err, &skip) && !ci()
}

func installPackages() error {
	apt := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 2000))
		}
		return nil
	}
	install := []string{"install", "-y", "-q", "slurm-wlm", "munge"}
	if err := apt(install...); err != nil {
		// A fresh image has no package lists yet.
		if uerr := apt("update", "-q"); uerr != nil {
			return fmt.Errorf("install Slurm: %w; then %w", err, uerr)
		}
		if err := apt(install...); err != nil {
			return fmt.Errorf("install Slurm: %w", err)
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func shortHostname() (string, error) {
	out, err := exec.Command("hostname", "-s").Output()
	if h := strings.TrimSpace(string(out)); err == nil && h != "" {
		return h, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("hostname: %w", err)
	}
	h, _, _ = strings.Cut(h, ".")
	return h, nil
}

// nodeResources reads CPUs and RealMemory from `slurmd -C`.
func nodeResources() (cpus, mem int, err error) {
	bin, err := lookPath("slurmd")
	if err != nil {
		return 0, 0, err
	}
	out, err := exec.Command(bin, "-C").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("slurmd -C: %w", err)
	}
	for _, w := range strings.Fields(strings.SplitN(string(out), "\n", 2)[0]) {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "CPUs":
			cpus, _ = strconv.Atoi(v)
		case "RealMemory":
			mem, _ = strconv.Atoi(v)
		}
	}
	if cpus <= 0 || mem <= 0 {
		return 0, 0, fmt.Errorf("slurmd -C: no CPUs or RealMemory in %q", out)
	}
	return cpus, mem, nil
}

const confTemplate = `# Written by internal/slurmtest; removed when the tests end.
ClusterName=whale-test
SlurmctldHost={{node}}(127.0.0.1)
SlurmctldPort={{ctldport}}
SlurmdPort={{dport}}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={{dir}}/munge.sock
StateSaveLocation={{dir}}/state
SlurmdSpoolDir={{dir}}/spool
SlurmctldPidFile={{dir}}/slurmctld.pid
SlurmdPidFile={{dir}}/slurmd.pid
SlurmctldLogFile={{dir}}/slurmctld.log
SlurmdLogFile={{dir}}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# Cancelled test jobs get SIGKILL 2 s after SIGTERM, not 30 s.
KillWait=2
NodeName={{node}} NodeAddr=127.0.0.1 CPUs={{cpus}} RealMemory={{mem}} State=UNKNOWN
# FORCE:4 lets four tiny test jobs share a core, so that parallel test
# packages do not queue behind each other on a two-core machine.
PartitionName=` + Partition + ` Nodes={{node}} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
`

// start starts a cluster in dir: first its watchdog, then munged,
// slurmctld and slurmd, each in a session of its own so that they outlive
// this process while other processes use them. The caller holds inuse
// shared, so the watchdog waits.
func start(dir string) (c *Cluster, err error) {
	// What is left of a cluster that broke: daemons, jobs, a watchdog.
	if pids := sweep(filepath.Join(dir, "slurm.conf"), dir); len(pids) > 0 {
		slog.Info("slurmtest: killed what was left of a broken test cluster", "pids", pids)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove old %s: %w", dir, err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "state"), filepath.Join(dir, "spool")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	node, err := shortHostname()
	if err != nil {
		return nil, err
	}
	cpus, mem, err := nodeResources()
	if err != nil {
		return nil, err
	}
	ctld, err := freePort()
	if err != nil {
		return nil, err
	}
	dport, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "slurm.conf")
	text := strings.NewReplacer("{{node}}", node, "{{dir}}", dir, "{{cpus}}", strconv.Itoa(cpus),
		"{{mem}}", strconv.Itoa(mem), "{{ctldport}}", strconv.Itoa(ctld), "{{dport}}", strconv.Itoa(dport)).Replace(confTemplate)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		return nil, err
	}

	var procs []*exec.Cmd
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, (&Cluster{Dir: dir}).Logs())
			// The watchdog stays: it removes the folder once this
			// process lets go of inuse.
			for _, p := range procs[min(1, len(procs)):] {
				_ = p.Process.Kill()
			}
		}
	}()
	env := []string{"SLURM_CONF=" + conf}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the test binary to run the watchdog: %w", err)
	}
	spawn := func(name string, env []string, bin string, args ...string) error {
		p, err := spawn(dir, name, env, bin, args...)
		if p != nil {
			procs = append(procs, p)
		}
		return err
	}
	// The watchdog goes first, so that whatever happens next, the cluster
	// is stopped once no process uses it.
	if err := spawn("watchdog", []string{watchdogEnv + "=" + dir}, self); err != nil {
		return nil, err
	}
	if err := spawn("munged", env, "munged", "-F", "--socket="+filepath.Join(dir, "munge.sock"),
		"--key-file="+filepath.Join(dir, "munge.key"), "--log-file="+filepath.Join(dir, "munged.log"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munged.seed")); err != nil {
		return nil, err
	}
	if err := waitFor(10*time.Second, func() error {
		_, err := os.Stat(filepath.Join(dir, "munge.sock"))
		return err
	}); err != nil {
		return nil, fmt.Errorf("munged did not create its socket: %w", err)
	}
	if err := spawn("slurmctld", env, "slurmctld", "-D", "-i", "-f", conf); err != nil {
		return nil, err
	}
	if err := spawn("slurmd", env, "slurmd", "-D", "-N", node, "-f", conf); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitIdle(ctx, env, node); err != nil {
		return nil, err
	}
	in := info{Conf: conf, Node: node, Watchdog: procs[0].Process.Pid}
	for _, p := range procs[1:] {
		in.PIDs = append(in.PIDs, p.Process.Pid)
	}
	data, _ := json.MarshalIndent(in, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "info.json"), data, 0o644); err != nil {
		return nil, err
	}
	return &Cluster{Dir: dir, Conf: conf, Node: node}, nil
}

// spawn starts a daemon in the foreground, in a session of its own so
// that it outlives this process and a signal to this process's group;
// its output goes to <dir>/<name>.out.
func spawn(dir, name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	path := bin
	if !filepath.IsAbs(bin) {
		var err error
		if path, err = lookPath(bin); err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
	}
	out, err := os.Create(filepath.Join(dir, name+".out"))
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	done := make(chan struct{})
	go func() {
		// Reaps the daemon should it end while this process lives.
		_ = cmd.Wait()
		close(done)
	}()
	// A daemon that exits at once (bad config, port taken) says why in
	// its output.
	select {
	case <-done:
		data, _ := os.ReadFile(out.Name())
		return cmd, fmt.Errorf("%s exited at start: %s", name, tail(string(data), 2000))
	case <-time.After(100 * time.Millisecond):
	}
	return cmd, nil
}

// release drops this process's use of the cluster; the watchdog stops
// the cluster when no process uses it any more.
func release() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.inuse != nil {
		shared.inuse.Close() // closing drops the shared lock
		shared.inuse = nil
	}
}

// watchdog waits until no process uses the cluster in dir — it can take
// inuse exclusively, which also happens when every user was killed — and
// then stops it: cancels the jobs, ends the daemons (SIGTERM, SIGKILL
// after 5 s), kills what is left of the jobs and removes dir. It returns
// the exit code.
func watchdog(dir string) int {
	f, err := openInuse()
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurmtest watchdog: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		fmt.Fprintf(os.Stderr, "slurmtest watchdog: flock %s: %v\n", f.Name(), err)
		return 1
	}
	conf := filepath.Join(dir, "slurm.conf")
	data, _ := os.ReadFile(filepath.Join(dir, "info.json"))
	_ = os.Remove(filepath.Join(dir, "info.json"))
	var in info
	_ = json.Unmarshal(data, &in)
	if len(in.PIDs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		env := []string{"SLURM_CONF=" + conf}
		_, _ = slurmCmd(ctx, env, "scancel", "--user=root")
		_ = waitFor(8*time.Second, func() error {
			out, err := slurmCmd(ctx, env, "squeue", "--noheader", "--user=root", "--format=%i")
			if err == nil && strings.TrimSpace(out) != "" {
				return errors.New("jobs left")
			}
			return nil
		})
		cancel()
	}
	// Reverse order of start: slurmd, slurmctld, munged.
	for i := len(in.PIDs) - 1; i >= 0; i-- {
		pid := in.PIDs[i]
		if !carries(pid, "SLURM_CONF="+conf) {
			continue // not ours (any more): pids are reused
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if waitFor(5*time.Second, func() error {
			if syscall.Kill(pid, 0) == nil && !zombie(pid) {
				return errors.New("alive")
			}
			return nil
		}) != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	sweep(conf, "")
	_ = os.RemoveAll(dir)
	return 0
}

// waitIdle waits until the node is idle (or mixed/allocated: another
// package's jobs run there), resuming it when Slurm marks it down or
// drained.
func waitIdle(ctx context.Context, env []string, node string) error {
	var last string
	resumed := false
	for {
		out, err := slurmCmd(ctx, env, "sinfo", "--noheader", "--Node", "--nodes="+node, "--format=%t")
		state := strings.TrimSpace(out)
		if err != nil {
			last = err.Error()
		} else {
			last = "node " + node + " is " + state
			switch strings.TrimRight(state, "*~#!%$@^-") {
			case "idle", "mix", "alloc", "comp":
				return nil
			case "down", "drain", "drng", "inval", "fail":
				if !resumed {
					_, _ = slurmCmd(ctx, env, "scontrol", "update", "nodename="+node, "state=resume")
					resumed = true
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurm node not ready: %s", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func slurmCmd(ctx context.Context, env []string, name string, args ...string) (string, error) {
	bin, err := lookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func waitFor(limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
