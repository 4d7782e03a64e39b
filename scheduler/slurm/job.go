package slurm

import (
	"fmt"
	"regexp"
	"strings"
)

// Job states as Slurm prints them.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateCompleting  = "COMPLETING"
	StateCompleted   = "COMPLETED"
	StateFailed      = "FAILED"
	StateCancelled   = "CANCELLED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateOutOfMemory = "OUT_OF_MEMORY"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
)

// ReasonDependencyNeverSatisfied is the Reason of a pending job whose
// afterok dependency failed (when it was submitted with KeepOnInvalidDep).
const ReasonDependencyNeverSatisfied = "DependencyNeverSatisfied"

// terminal states: the job will not run (again) unless requeued by hand.
var terminal = map[string]bool{
	StateCompleted: true, StateFailed: true, StateCancelled: true, StateTimeout: true,
	StateNodeFail: true, StatePreempted: true, StateOutOfMemory: true, StateBootFail: true,
	StateDeadline: true,
}

// Job is what Slurm reports about one job, one array task, or (from State
// with an array's id) a whole array.
type Job struct {
	// ID is "123", "123_4" for an array task, or "123_[5-7]" for the
	// tasks of an array not yet started (squeue) or "123_[5-7]" (scontrol).
	ID string
	// ArrayJobID and ArrayTaskID are set for array tasks; ArrayTaskID is
	// a range such as "5-7" for tasks not yet started.
	ArrayJobID  string
	ArrayTaskID string
	Name        string
	Partition   string
	// State is one of the State* constants (or another Slurm state); for
	// a whole array, see Tasks.
	State string
	// Reason says why a job is pending or how it ended ("Dependency",
	// "DependencyNeverSatisfied", "NonZeroExitCode", "None").
	Reason string
	// Dependency is as Slurm shows it, e.g. "afterok:12(unfulfilled)".
	Dependency string
	// ExitCode is "status:signal" (scontrol only).
	ExitCode string
	// StdOut and StdErr are the log paths (scontrol only).
	StdOut, StdErr string
	// Tasks are the array's tasks when State was asked about an array's
	// id.
	Tasks []Job
}

// Done reports whether the job has ended (successfully or not).
func (j Job) Done() bool { return terminal[j.State] }

// Succeeded reports whether the job (every task of an array) completed
// with exit code 0.
func (j Job) Succeeded() bool { return j.State == StateCompleted }

// NeverRuns reports whether the job is pending on a dependency that can no
// longer be satisfied; nothing but a cancel ends it.
func (j Job) NeverRuns() bool {
	return j.State == StatePending && j.Reason == ReasonDependencyNeverSatisfied
}

// aggregate makes one Job of an array's tasks: still active if any task
// is; otherwise COMPLETED if all completed, else the state of the first
// task that did not (FAILED before TIMEOUT before the others).
func aggregate(id string, tasks []Job) Job {
	a := Job{ID: id, ArrayJobID: id, Name: tasks[0].Name, Partition: tasks[0].Partition, Tasks: tasks}
	var active, bad *Job
	for i := range tasks {
		t := &tasks[i]
		switch {
		case !t.Done():
			if active == nil || t.State == StateRunning && active.State != StateRunning {
				active = t
			}
		case t.State != StateCompleted:
			if bad == nil || failRank(t.State) < failRank(bad.State) {
				bad = t
			}
		}
	}
	switch {
	case active != nil:
		a.State, a.Reason, a.Dependency = active.State, active.Reason, active.Dependency
	case bad != nil:
		a.State, a.Reason, a.ExitCode = bad.State, bad.Reason, bad.ExitCode
	default:
		a.State, a.Reason, a.ExitCode = StateCompleted, "None", "0:0"
	}
	return a
}

// failRank orders the ways a task can end badly, most telling first.
func failRank(state string) int {
	for i, s := range []string{StateFailed, StateOutOfMemory, StateTimeout, StateNodeFail, StateBootFail, StateDeadline, StatePreempted, StateCancelled} {
		if s == state {
			return i
		}
	}
	return 100
}

// parseSqueue reads lines of squeueFormat.
func parseSqueue(out string) ([]Job, error) {
	var jobs []Job
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "\x1f")
		if len(f) != 8 {
			return nil, fmt.Errorf("squeue output line %d: want 8 fields, got %d: %q", n+1, len(f), line)
		}
		j := Job{ID: f[0], Name: f[3], State: f[4], Reason: f[5], Dependency: null(f[6]), Partition: f[7]}
		if task := null(f[2]); task != "" {
			j.ArrayJobID, j.ArrayTaskID = f[1], strings.Trim(task, "[]")
		}
		if j.ID == "" || j.State == "" {
			return nil, fmt.Errorf("squeue output line %d: no job id or state: %q", n+1, line)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func null(s string) string {
	if s == "(null)" || s == "N/A" {
		return ""
	}
	return s
}

// scontrolKey is a key of `scontrol show job --oneliner`: they start with
// a capital letter and may hold '/', ':' and '_' (Socks/Node,
// AllocNode:Sid, MCS_label).
var scontrolKey = regexp.MustCompile(`^[A-Z][A-Za-z0-9_/:]*$`)

// parseScontrol reads `scontrol show job --oneliner`: one job per line,
// "Key=Value" separated by single spaces. A value may itself hold spaces
// (a job name, a command line), so a word that does not start with a key
// belongs to the value before it.
func parseScontrol(out string) ([]Job, error) {
	var jobs []Job
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		kv := parseKV(line)
		id := kv["JobId"]
		if id == "" {
			return nil, fmt.Errorf("scontrol output line %d: no JobId: %q", n+1, lastBytes(line, 200))
		}
		j := Job{
			ID: id, Name: kv["JobName"], Partition: kv["Partition"], State: kv["JobState"],
			Reason: kv["Reason"], Dependency: null(kv["Dependency"]), ExitCode: kv["ExitCode"],
			StdOut: kv["StdOut"], StdErr: kv["StdErr"],
		}
		if a := kv["ArrayJobId"]; a != "" {
			j.ArrayJobID, j.ArrayTaskID = a, kv["ArrayTaskId"]
			if strings.ContainsAny(j.ArrayTaskID, "-,") {
				j.ID = a + "_[" + j.ArrayTaskID + "]"
			} else {
				j.ID = a + "_" + j.ArrayTaskID
			}
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func parseKV(line string) map[string]string {
	kv := map[string]string{}
	last := ""
	for _, w := range strings.Split(line, " ") {
		k, v, ok := strings.Cut(w, "=")
		if ok && scontrolKey.MatchString(k) {
			if _, seen := kv[k]; seen {
				last = "" // the first value wins; drop the repeat's words
				continue
			}
			kv[k] = v
			last = k
			continue
		}
		if last != "" {
			kv[last] += " " + w
		}
	}
	return kv
}
