package slurm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Fake is an in-memory Scheduler for unit tests of code that submits jobs.
// It runs nothing: the test moves jobs along with Start and Finish, and
// Fake applies afterok dependencies the way Slurm 22.05 does (a dependent
// of a failed job is cancelled, or left pending with Reason
// DependencyNeverSatisfied when submitted with KeepOnInvalidDep). It reads
// the job name, array size and dependencies from the script's #SBATCH
// lines, so scripts from a Renderer work unchanged.
type Fake struct {
	mu      sync.Mutex
	next    int
	jobs    map[string]*fakeJob
	order   []string
	scripts []string
	// SubmitErr, when set, is returned by every Submit.
	SubmitErr error
}

type fakeJob struct {
	id      string
	name    string
	part    string
	afterOK []string
	kill    bool
	tasks   []*Job // one for a plain job
	array   bool
}

var _ Scheduler = (*Fake)(nil)

// NewFake returns an empty Fake whose first job id is 1000.
func NewFake() *Fake { return &Fake{next: 1000, jobs: map[string]*fakeJob{}} }

// Scripts returns the scripts submitted so far, in order.
func (f *Fake) Scripts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.scripts)
}

// Submit implements Scheduler.
func (f *Fake) Submit(ctx context.Context, script string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.SubmitErr != nil {
		return "", f.SubmitErr
	}
	if !strings.HasPrefix(script, "#!") {
		return "", fmt.Errorf("sbatch: script does not start with #! (an interpreter line)")
	}
	j := &fakeJob{name: "sbatch", part: "debug"}
	shards := 0
	for _, d := range Directives(script) {
		k, v, _ := strings.Cut(d, "=")
		switch k {
		case "--job-name", "-J":
			j.name = v
		case "--partition", "-p":
			j.part = v
		case "--array", "-a":
			spec, _, _ := strings.Cut(v, "%")
			lo, hi, ok := strings.Cut(spec, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil || a != 0 || b < a {
				return "", fmt.Errorf("fake sbatch: array %q: only 0-N is supported", v)
			}
			shards = b + 1
		case "--dependency", "-d":
			ids, ok := strings.CutPrefix(v, "afterok:")
			if !ok {
				return "", fmt.Errorf("fake sbatch: dependency %q: only afterok is supported", v)
			}
			for _, id := range strings.Split(ids, ":") {
				if _, ok := f.lookup(id); !ok {
					return "", fmt.Errorf("sbatch: error: Batch job submission failed: Job dependency problem (no job %s)", id)
				}
				j.afterOK = append(j.afterOK, id)
			}
		case "--kill-on-invalid-dep":
			j.kill = v == "yes"
		}
	}
	j.id = strconv.Itoa(f.next)
	f.next++
	if shards > 0 {
		j.array = true
		f.next += shards // tasks get their own internal ids in Slurm too
		for i := range shards {
			j.tasks = append(j.tasks, &Job{ID: j.id + "_" + strconv.Itoa(i), ArrayJobID: j.id, ArrayTaskID: strconv.Itoa(i)})
		}
	} else {
		j.tasks = []*Job{{ID: j.id}}
	}
	for _, t := range j.tasks {
		t.Name, t.Partition, t.State, t.Reason = j.name, j.part, StatePending, "None"
		if len(j.afterOK) > 0 {
			t.Reason = "Dependency"
			t.Dependency = dependencyString(j.afterOK, "unfulfilled")
		}
	}
	f.jobs[j.id] = j
	f.order = append(f.order, j.id)
	f.scripts = append(f.scripts, script)
	f.resolve()
	return j.id, nil
}

// lookup finds a job or an array's tasks by id ("12" or "12_3").
func (f *Fake) lookup(id string) ([]*Job, bool) {
	master, task, isTask := strings.Cut(id, "_")
	j, ok := f.jobs[master]
	if !ok {
		return nil, false
	}
	if !isTask {
		return j.tasks, true
	}
	for _, t := range j.tasks {
		if t.ArrayTaskID == task {
			return []*Job{t}, true
		}
	}
	return nil, false
}

// Start marks a job (all of an array's tasks, or one task "12_3") as
// running. A job whose dependencies are not met cannot start.
func (f *Fake) Start(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	tasks, ok := f.lookup(id)
	if !ok {
		return fmt.Errorf("fake: no job %s", id)
	}
	for _, t := range tasks {
		if t.State != StatePending || t.Reason != "None" {
			return fmt.Errorf("fake: job %s cannot start: %s (%s)", t.ID, t.State, t.Reason)
		}
	}
	for _, t := range tasks {
		t.State = StateRunning
	}
	return nil
}

// Finish ends a job (or an array, or one task) in state, e.g.
// StateCompleted or StateFailed, and applies the dependencies on it.
func (f *Fake) Finish(id, state string) error {
	if !terminal[state] {
		return fmt.Errorf("fake: %s is not a final state", state)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tasks, ok := f.lookup(id)
	if !ok {
		return fmt.Errorf("fake: no job %s", id)
	}
	for _, t := range tasks {
		if t.Done() {
			continue
		}
		t.State, t.Reason, t.ExitCode = state, "None", "0:0"
		if state == StateFailed {
			t.Reason, t.ExitCode = "NonZeroExitCode", "1:0"
		}
	}
	f.resolve()
	return nil
}

// resolve applies afterok: a job whose dependencies all completed becomes
// eligible; one with a dependency that ended otherwise never runs.
func (f *Fake) resolve() {
	for changed := true; changed; {
		changed = false
		for _, id := range f.order {
			j := f.jobs[id]
			if len(j.afterOK) == 0 {
				continue
			}
			ok, failed := true, false
			for _, dep := range j.afterOK {
				tasks, _ := f.lookup(dep)
				d := aggregateTasks(dep, tasks)
				if !d.Succeeded() {
					ok = false
				}
				if d.Done() && !d.Succeeded() {
					failed = true
				}
			}
			for _, t := range j.tasks {
				if t.State != StatePending || t.Reason == ReasonDependencyNeverSatisfied {
					continue
				}
				switch {
				case failed && j.kill:
					t.State, t.Reason = StateCancelled, ReasonDependencyNeverSatisfied
					t.Dependency = dependencyString(j.afterOK, "failed")
					changed = true
				case failed:
					t.Reason = ReasonDependencyNeverSatisfied
					t.Dependency = dependencyString(j.afterOK, "failed")
					changed = true
				case ok && t.Reason == "Dependency":
					t.Reason = "None"
					changed = true
				}
			}
		}
	}
}

// dependencyString is how Slurm 22.05 shows a dependency, e.g.
// "afterok:11(failed)"; the fake does not track each id's own status.
func dependencyString(ids []string, status string) string {
	return "afterok:" + strings.Join(ids, ":") + "(" + status + ")"
}

func aggregateTasks(id string, tasks []*Job) Job {
	if len(tasks) == 1 && tasks[0].ArrayJobID == "" {
		return *tasks[0]
	}
	jobs := make([]Job, len(tasks))
	for i, t := range tasks {
		jobs[i] = *t
	}
	if len(jobs) == 1 && strings.Contains(id, "_") {
		return jobs[0]
	}
	return aggregate(id, jobs)
}

// Cancel implements Scheduler.
func (f *Fake) Cancel(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		tasks, _ := f.lookup(id)
		for _, t := range tasks {
			if !t.Done() {
				t.State, t.Reason = StateCancelled, "None"
			}
		}
	}
	f.resolve()
	return nil
}

// Jobs implements Scheduler.
func (f *Fake) Jobs(ctx context.Context, flt Filter) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Job
	for _, id := range f.order {
		j := f.jobs[id]
		if flt.NamePrefix != "" && !strings.HasPrefix(j.name, flt.NamePrefix) {
			continue
		}
		for _, t := range j.tasks {
			if len(flt.IDs) > 0 && !slices.Contains(flt.IDs, j.id) && !slices.Contains(flt.IDs, t.ID) {
				continue
			}
			out = append(out, *t)
		}
	}
	return out, nil
}

// State implements Scheduler.
func (f *Fake) State(ctx context.Context, id string) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tasks, ok := f.lookup(id)
	if !ok {
		return Job{}, fmt.Errorf("scontrol show job %s: %w", id, ErrUnknownJob)
	}
	return aggregateTasks(id, tasks), nil
}
