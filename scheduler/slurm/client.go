package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/retry"
)

// Scheduler is what the pipeline needs from a batch system. Client talks
// to Slurm; Fake is an in-memory stand-in for unit tests.
type Scheduler interface {
	// Submit queues script (a complete batch script) and returns its job
	// id. It is not retried: on error the job may or may not exist.
	Submit(ctx context.Context, script string) (string, error)
	// Cancel cancels jobs (an array's id cancels all its tasks). Unknown
	// or finished jobs are not an error.
	Cancel(ctx context.Context, ids ...string) error
	// Jobs lists the jobs the controller still knows that match f, array
	// tasks one by one.
	Jobs(ctx context.Context, f Filter) ([]Job, error)
	// State reports one job; for an array's id, the array as a whole with
	// its tasks in Tasks. ErrUnknownJob when the controller has no record.
	State(ctx context.Context, id string) (Job, error)
}

// ErrUnknownJob: the controller has no record of the job — it never
// existed, or it ended longer than MinJobAge ago.
var ErrUnknownJob = errors.New("slurm job unknown to the controller")

// CommandError is a Slurm command that failed; its message names the
// command and carries its stderr.
type CommandError struct {
	Command string // e.g. "sbatch --parsable"
	Stderr  string
	Err     error
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = "(no stderr)"
	}
	return fmt.Sprintf("%s: %v: %s", e.Command, e.Err, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }

// transient reports whether the controller was only busy or restarting.
func (e *CommandError) transient() bool {
	for _, s := range []string{"Socket timed out", "Unable to contact slurm controller", "Resource temporarily unavailable", "Connection refused", "Zero Bytes were transmitted"} {
		if strings.Contains(e.Stderr, s) {
			return true
		}
	}
	return false
}

// Client runs the Slurm commands. The zero value uses PATH and the
// process's environment.
type Client struct {
	// Bin is the folder of sbatch, scancel, squeue and scontrol; empty
	// means PATH.
	Bin string
	// Env is added to the process's environment for every command, e.g.
	// SLURM_CONF=/path/slurm.conf. sbatch passes the environment on to the
	// job (--export=ALL), which is how credentials reach it.
	Env []string
	// Dir is where sbatch runs; relative log paths without --chdir
	// resolve against it. Empty: the current directory.
	Dir string
	// Retries is how many times a read (squeue, scontrol) is retried when
	// the controller is busy, with internal/retry's backoff (ceilings of
	// 0.5 s doubling up to 5 s); 0 means 3, negative means none.
	Retries int
}

var _ Scheduler = (*Client)(nil)

// run runs one command; retryBusy retries it while the controller is busy
// (reads only: a retried sbatch could submit twice).
func (c *Client) run(ctx context.Context, stdin string, retryBusy bool, name string, args ...string) (string, error) {
	bin := name
	if c.Bin != "" {
		bin = filepath.Join(c.Bin, name)
	}
	p := retry.Policy{Attempts: 1, Base: 500 * time.Millisecond, Max: 5 * time.Second}
	if retryBusy {
		switch {
		case c.Retries == 0:
			p.Attempts += 3
		case c.Retries > 0:
			p.Attempts += c.Retries
		}
	}
	label := strings.Join(append([]string{name}, args...), " ")
	var out string
	err := retry.Do(ctx, p, func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), c.Env...)
		cmd.Dir = c.Dir
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		if runErr == nil {
			out = stdout.String()
			return nil
		}
		if ctx.Err() != nil {
			// Killed because ctx ended: its stderr says nothing useful.
			return retry.Permanent(fmt.Errorf("%s: %w", label, context.Cause(ctx)))
		}
		ce := &CommandError{Command: label, Stderr: lastBytes(stderr.String(), 4096), Err: runErr}
		if !ce.transient() {
			return retry.Permanent(ce)
		}
		return ce
	}, retry.OnRetry(func(e retry.Event) {
		slog.Debug("slurm command busy, retrying", "command", label, "attempt", e.Attempt, "wait", e.Wait, "err", e.Err)
	}))
	return out, err
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Submit runs `sbatch --parsable` with the script on stdin.
func (c *Client) Submit(ctx context.Context, script string) (string, error) {
	if !strings.HasPrefix(script, "#!") {
		return "", fmt.Errorf("sbatch: script does not start with #! (an interpreter line)")
	}
	out, err := c.run(ctx, script, false, "sbatch", "--parsable")
	if err != nil {
		return "", err
	}
	return parseSubmitted(out)
}

// parseSubmitted reads sbatch --parsable's "id" or "id;cluster".
func parseSubmitted(out string) (string, error) {
	line := strings.TrimSpace(out)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		// Site plugins may print notices before the id.
		line = strings.TrimSpace(line[i+1:])
	}
	id, _, _ := strings.Cut(line, ";")
	if !jobIDRE.MatchString(id) {
		return "", fmt.Errorf("sbatch --parsable: cannot read a job id from %q", lastBytes(out, 200))
	}
	return id, nil
}

// Cancel runs scancel.
func (c *Client) Cancel(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if !jobIDRE.MatchString(id) {
			return fmt.Errorf("scancel: %q is not a job id", id)
		}
	}
	_, err := c.run(ctx, "", false, "scancel", ids...)
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Stderr, "Invalid job id") {
		return nil
	}
	return err
}

// Filter selects jobs. Empty fields select everything.
type Filter struct {
	// IDs are job ids; an array's id selects all its tasks.
	IDs []string
	// NamePrefix keeps jobs whose name starts with it.
	NamePrefix string
	// User restricts to one user's jobs; empty means the caller's
	// (squeue --me), "*" means everyone's.
	User string
}

// squeueFields are what Jobs asks squeue for, in this order.
const squeueFormat = "%i\x1f%F\x1f%K\x1f%j\x1f%T\x1f%r\x1f%E\x1f%P"

// Jobs runs squeue with a --format it can split unambiguously. (squeue
// --json exists in 22.05 but ignores -j and -n there and prints every job
// of every user, so on a busy cluster it is the slow choice.)
func (c *Client) Jobs(ctx context.Context, f Filter) ([]Job, error) {
	args := []string{"--noheader", "--array", "--states=all", "--format=" + squeueFormat}
	switch f.User {
	case "":
		args = append(args, "--me")
	case "*":
	default:
		args = append(args, "--user="+f.User)
	}
	if len(f.IDs) > 0 {
		for _, id := range f.IDs {
			if !jobIDRE.MatchString(id) {
				return nil, fmt.Errorf("squeue: %q is not a job id", id)
			}
		}
		args = append(args, "--jobs="+strings.Join(f.IDs, ","))
	}
	out, err := c.run(ctx, "", true, "squeue", args...)
	var ce *CommandError
	if errors.As(err, &ce) && len(f.IDs) > 0 && strings.Contains(ce.Stderr, "Invalid job id") {
		// squeue fails when none of the ids is known any more.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	jobs, err := parseSqueue(out)
	if err != nil {
		return nil, err
	}
	if f.NamePrefix != "" {
		jobs = slices.DeleteFunc(jobs, func(j Job) bool { return !strings.HasPrefix(j.Name, f.NamePrefix) })
	}
	return jobs, nil
}

// Cluster is the name of the cluster this machine's Slurm commands talk
// to (ClusterName of `scontrol show config`): job ids are per cluster.
func (c *Client) Cluster(ctx context.Context) (string, error) {
	out, err := c.run(ctx, "", true, "scontrol", "show", "config")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "ClusterName" {
			if name := strings.TrimSpace(v); name != "" {
				return name, nil
			}
		}
	}
	return "", errors.New("scontrol show config: no ClusterName")
}

// State runs `scontrol show job -o ID`, which works without accounting.
func (c *Client) State(ctx context.Context, id string) (Job, error) {
	if !jobIDRE.MatchString(id) {
		return Job{}, fmt.Errorf("scontrol show job: %q is not a job id", id)
	}
	out, err := c.run(ctx, "", true, "scontrol", "show", "job", "--oneliner", id)
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Stderr, "Invalid job id") {
		// The controller forgets a job MinJobAge after it ends; the
		// accounting database, where there is one, still knows it.
		if j, ok := c.accounted(ctx, id); ok {
			return j, nil
		}
		return Job{}, fmt.Errorf("scontrol show job %s: %w", id, ErrUnknownJob)
	}
	if err != nil {
		return Job{}, err
	}
	jobs, err := parseScontrol(out)
	if err != nil {
		return Job{}, fmt.Errorf("scontrol show job %s: %w", id, err)
	}
	j, err := pick(id, jobs)
	if err != nil {
		return Job{}, fmt.Errorf("scontrol show job %s: %w", id, err)
	}
	return j, nil
}

// pick returns the job id asked for among the records scontrol printed:
// the job itself, or the array as a whole.
func pick(id string, jobs []Job) (Job, error) {
	if len(jobs) == 0 {
		return Job{}, ErrUnknownJob
	}
	for _, j := range jobs {
		if j.ID == id && j.ArrayJobID == "" {
			return j, nil
		}
	}
	var tasks []Job
	for _, j := range jobs {
		if j.ID == id && !strings.Contains(j.ArrayTaskID, "-") {
			return j, nil // one array task, asked for as ID_TASK
		}
		if j.ArrayJobID == id {
			tasks = append(tasks, j)
		}
	}
	if len(tasks) == 0 {
		return Job{}, fmt.Errorf("%w: no record among %d", ErrUnknownJob, len(jobs))
	}
	return aggregate(id, tasks), nil
}

// accounted asks sacct about a job the controller has forgotten. It
// reports false where there is no sacct or no accounting storage (sacct
// then fails), as on the single-node test clusters.
func (c *Client) accounted(ctx context.Context, id string) (Job, bool) {
	bin := "sacct"
	if c.Bin != "" {
		bin = filepath.Join(c.Bin, bin)
	}
	if _, err := exec.LookPath(bin); err != nil {
		return Job{}, false
	}
	out, err := c.run(ctx, "", false, "sacct", "-j", id, "-n", "-P", "-X", "-o", "JobID,JobName,Partition,State,ExitCode")
	if err != nil {
		return Job{}, false
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 5 || f[0] != id {
			continue
		}
		// sacct writes "CANCELLED by 0"; the state is the first word.
		state, _, _ := strings.Cut(f[3], " ")
		return Job{ID: f[0], Name: f[1], Partition: f[2], State: state, ExitCode: f[4]}, true
	}
	return Job{}, false
}
