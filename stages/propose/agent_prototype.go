package propose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/play"
)

// Prototypes: the agent tries a harness on search-set tasks before it
// proposes it, the way the reference Meta-Harness agent does.
//
// The stage plays them itself, on requests the agent writes into its
// workspace; the agent never calls the model or the tools. That is the
// one design that holds inside the sandbox without handing anything
// over: the model's API key, the bucket's credentials, a retrieval
// index in the bucket and a code sandbox all stay in whale's process,
// which already has them wired with the run's configuration (the
// domain's tools, the model client of the plan's model), and the agent
// needs no program but a shell. The workspace's ./try (tryScript) writes
// a request folder prototype/requests/<id>/ (harness.star and tasks, one
// search-set task id a line), renamed into place whole; the stage polls
// the folder, plays each task once with episode.Run against the run's
// endpoints and tools (Stage.Model, Stage.Domain) with the config's
// sampling, and writes trajectories.jsonl (the lines of the candidates'
// own files), summary.txt and, last, done ("ok" or "error") into the
// request folder, which ./try waits for. Only tasks of the stage's tasks
// input (the search set) are played; a row of split "test" is refused.
const (
	// DefaultPrototypeEpisodes is the planner's budget of prototype
	// episodes per propose stage: 8 tasks for each of the 8 candidates
	// of a paper-sized iteration, a quarter of one search-set evaluation
	// of a candidate (256 tasks).
	DefaultPrototypeEpisodes = 64
	// MaxPrototypeEpisodes bounds Prototype.Episodes.
	MaxPrototypeEpisodes = 4096
	// prototypeRequests bounds the requests answered per stage, refused
	// ones included (each rescans the tasks input).
	prototypeRequests = 256
	// prototypeScan bounds the entries of prototype/requests looked at.
	prototypeScan = 1024
	// prototypeTasksBytes bounds a request's tasks file.
	prototypeTasksBytes = 64 << 10
	// prototypePoll is how often the stage looks for requests.
	prototypePoll = 200 * time.Millisecond
	// prototypeConcurrency is how many episodes of a request run at once.
	prototypeConcurrency = 8
)

// Prototype is what the agent backend's ./try plays with: the run's model
// and decoding (as the search-set evaluation has them) and a budget of
// episodes for the whole stage.
type Prototype struct {
	ModelName string        `json:"model_name"`
	Sampling  play.Sampling `json:"sampling"`
	// Episodes is the stage's budget: every task of every request is
	// one; a request past it plays what is left and says so.
	Episodes int `json:"episodes"`
}

func (p *Prototype) check(backend string) []error {
	if p == nil {
		return nil
	}
	var errs []error
	if backend != BackendAgent {
		errs = append(errs, fmt.Errorf("prototype: only the agent backend prototypes, not %s", backend))
	}
	if p.ModelName == "" {
		errs = append(errs, errors.New("prototype.model_name is empty: name the model the prototypes ask"))
	}
	if p.Episodes < 1 || p.Episodes > MaxPrototypeEpisodes {
		errs = append(errs, fmt.Errorf("prototype.episodes %d: want 1 to %d", p.Episodes, MaxPrototypeEpisodes))
	}
	return errs
}

// tryScript is the workspace's ./try: POSIX sh and coreutils only, so it
// runs in the sandbox with whatever the agent has.
const tryScript = `#!/bin/sh
# ./try HARNESS_FILE TASK_ID [TASK_ID ...]
# Plays HARNESS_FILE once on each search-set task named (ids: search_tasks.txt;
# repeat an id for another sample) against the run's model and tools, and
# prints the outcome. whale plays it: this script writes the request to
# prototype/requests/ and waits for the answer. Each task is one episode of the
# stage's budget (see SKILL.md); a harness that does not load costs nothing.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: ./try HARNESS_FILE TASK_ID [TASK_ID ...]" >&2
    exit 2
fi
ws=$(cd "$(dirname "$0")" && pwd)
file=$1
shift
if [ ! -f "$file" ]; then
    echo "try: no file $file" >&2
    exit 2
fi
id=req-$(date +%Y%m%d-%H%M%S)-$$
tmp=$ws/prototype/requests/.$id
mkdir "$tmp"
cp "$file" "$tmp/harness.star"
for t in "$@"; do printf '%s\n' "$t"; done > "$tmp/tasks"
mv "$tmp" "$ws/prototype/requests/$id"
req=prototype/requests/$id
echo "try: request $req sent; waiting for whale to play it" >&2
while [ ! -f "$ws/$req/done" ]; do sleep 1; done
cat "$ws/$req/summary.txt"
test "$(cat "$ws/$req/done")" = ok
`

// prototyper answers the agent's requests while it runs.
type prototyper struct {
	cfg   Prototype
	dom   episode.Domain
	model episode.Chatter
	x     *stages.Exec
	reqs  *os.File // prototype/requests, opened before the agent ran
	sc    *redact.Scrubber
	log   *slog.Logger

	seen     map[string]bool
	used     int // episodes played
	requests int // requests answered
	ignored  int // entries that were not request folders
}

// prototypeSeen bounds the names the stage remembers, and so the entries
// of prototype/requests it looks at: an agent that creates names without
// end costs it neither memory nor log lines past this.
const prototypeSeen = prototypeRequests + prototypeScan

// serve answers requests until ctx ends (the agent has ended).
func (p *prototyper) serve(ctx context.Context) {
	t := time.NewTicker(prototypePoll)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *prototyper) poll(ctx context.Context) {
	if _, err := p.reqs.Seek(0, io.SeekStart); err != nil {
		return
	}
	entries, _ := p.reqs.ReadDir(prototypeScan)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || p.seen[name] || ctx.Err() != nil {
			continue
		}
		if len(p.seen) >= prototypeSeen {
			if len(p.seen) == prototypeSeen {
				p.log.Warn("prototype/requests holds too many entries: no further ones are looked at", "limit", prototypeSeen)
				p.seen[""] = true // said once
			}
			return
		}
		p.seen[name] = true
		p.handle(ctx, name)
	}
}

// handle answers the request folder name; what cannot be answered (not a
// folder, a folder it cannot write to) is logged and left.
func (p *prototyper) handle(ctx context.Context, name string) {
	dir, err := openAt(p.reqs, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		// A few lines say what was ignored; an agent making files
		// without end does not fill whale's log.
		if p.ignored++; p.ignored <= 10 {
			p.log.Warn("prototype request is not a folder: ignored", "name", name, "ignored_so_far", p.ignored)
		}
		return
	}
	defer dir.Close()
	var ans answer
	if p.requests >= prototypeRequests {
		ans.fail("refused: this stage answers at most %d prototype requests", prototypeRequests)
	} else {
		p.requests++
		p.play(ctx, dir, name, &ans)
	}
	if ctx.Err() != nil {
		return // the agent is gone: nobody waits
	}
	if err := ans.write(dir, p.sc); err != nil {
		p.log.Warn("prototype answer not written", "request", name, "err", err)
	}
}

// answer is what a request gets back besides its trajectories.jsonl,
// which play streams into the request folder.
type answer struct {
	summary strings.Builder
	failed  bool
}

func (a *answer) fail(format string, args ...any) {
	a.failed = true
	fmt.Fprintf(&a.summary, "try: "+format+"\n", args...)
}

// play runs the request in dir into ans.
func (p *prototyper) play(ctx context.Context, dir *os.File, name string, ans *answer) {
	src, err := readAt(dir, "harness.star", harness.MaxSourceBytes)
	if err != nil {
		ans.fail("%v", err)
		return
	}
	list, err := readAt(dir, "tasks", prototypeTasksBytes)
	if err != nil {
		ans.fail("%v", err)
		return
	}
	var ids []string
	for line := range strings.Lines(string(list)) {
		if id := strings.TrimSpace(line); id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		ans.fail("tasks names no task id (one a line)")
		return
	}
	h, err := harness.Load("harness.star", src, harness.Options{Contract: p.dom.Contract()})
	if err != nil {
		ans.fail("the harness does not load (nothing played, nothing spent):\n%v", err)
		return
	}
	left := p.cfg.Episodes - p.used
	if left <= 0 {
		ans.fail("refused: the stage's budget of %d prototype episodes is spent", p.cfg.Episodes)
		return
	}
	var cut []string
	if len(ids) > left {
		ids, cut = ids[:left], ids[left:]
	}
	tasks, err := p.findTasks(ctx, ids)
	if err != nil {
		ans.fail("%v (nothing played, nothing spent)", err)
		return
	}
	first := p.used
	p.used += len(ids)
	p.log.Info("agent prototype", "request", name, "harness_id", h.ID(), "episodes", len(ids), "budget_left", p.cfg.Episodes-p.used)
	fmt.Fprintf(&ans.summary, "harness %s on %d search-set task(s); budget: %d of %d episodes used\n",
		h.ID(), len(ids), p.used, p.cfg.Episodes)
	if len(cut) > 0 {
		ans.failed = true
		fmt.Fprintf(&ans.summary, "try: %d task(s) not played: the stage's budget of %d prototype episodes is spent (%s)\n",
			len(cut), p.cfg.Episodes, strings.Join(cut, " "))
	}
	ecfg := episode.Config{Sampling: p.cfg.Sampling.Models()}
	jobs := func(yield func(episode.Job) bool) {
		for i, id := range ids {
			seed := play.Seed(p.x.Seed, id, first+i)
			if !yield(episode.Job{Index: i, Task: tasks[id], Sample: first + i, Seed: seed}) {
				return
			}
		}
	}
	out, err := createAt(dir, "trajectories.jsonl")
	if err != nil {
		ans.fail("%v", err)
		return
	}
	defer out.Close()
	var sum, turns float64
	err = episode.RunBatch(ctx, min(prototypeConcurrency, len(ids)), iter.Seq[episode.Job](jobs),
		func(ctx context.Context, j episode.Job) episode.Result {
			c := ecfg
			c.Seed = j.Seed
			return episode.Run(ctx, p.dom, h, p.model, j.Task, c)
		},
		func(j episode.Job, r episode.Result) error {
			row := r.Row(schemas.Rollout{Run: p.x.Run, Position: p.x.Position, HarnessID: h.ID(), TaskID: j.Task.ID, Sample: int32(j.Sample), Seed: j.Seed})
			if row.ModelID == "" {
				row.ModelID = p.cfg.ModelName
			}
			line, err := trajectoryLine(row, "", p.sc)
			if err != nil {
				return err
			}
			if _, err := out.Write(line); err != nil {
				return err
			}
			sum += row.Reward
			turns += float64(row.Turns)
			fmt.Fprintf(&ans.summary, "task %s  reward %g  correct %v  turns %d  finish %s", row.TaskID, row.Reward, row.Correct, row.Turns, row.FinishReason)
			if row.Error != "" {
				fmt.Fprintf(&ans.summary, "  error: %s", clip(oneLine(row.Error, 400), 400))
			}
			ans.summary.WriteByte('\n')
			return nil
		})
	if err == nil {
		err = out.Close()
	}
	if err != nil {
		ans.fail("%v", err)
		return
	}
	n := float64(len(ids))
	fmt.Fprintf(&ans.summary, "mean reward %.3f, mean turns %.2f over %d episode(s)\ntrajectories: prototype/requests/%s/trajectories.jsonl (one JSON line per episode, as in candidates/*/trajectories.jsonl)\n",
		sum/n, turns/n, len(ids), name)
}

// errTasksFound stops the scan of the tasks input.
var errTasksFound = errors.New("all tasks found")

// findTasks reads the rows of ids from the stage's tasks input, the
// search set, scanning it row by row; an id it does not hold, or a row
// of the test split, is an error.
func (p *prototyper) findTasks(ctx context.Context, ids []string) (map[string]schemas.Task, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	found := map[string]schemas.Task{}
	in, err := p.x.Input("tasks")
	if err != nil {
		return nil, err
	}
	var bad error
	for _, f := range in.Table(schemas.Tasks.Name) {
		ra, err := p.x.Open(ctx, in, f)
		if err != nil {
			return nil, fmt.Errorf("open tasks %s: %w", f.Name, err)
		}
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(t schemas.Task) error {
			if !want[t.ID] {
				return nil
			}
			if t.Split == sectionTest {
				bad = fmt.Errorf("task %s is of the test split, which the proposer never plays", t.ID)
				return bad
			}
			if _, ok := found[t.ID]; !ok {
				found[t.ID] = t
			}
			if len(found) == len(want) {
				return errTasksFound
			}
			return nil
		})
		if bad != nil {
			return nil, bad
		}
		if errors.Is(err, errTasksFound) {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read tasks %s: %w", in.FileKey(f), err)
		}
	}
	var missing []string
	for _, id := range ids {
		if _, ok := found[id]; !ok && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 5 {
		missing = append(missing[:5], "…")
	}
	return nil, fmt.Errorf("no task %s in the search set (search_tasks.txt lists its ids)", strings.Join(missing, ", "))
}

// write puts the answer into the request folder dir: summary.txt, then
// done, renamed into place last so that ./try reads a
// whole answer. Files are created new (O_EXCL), never through a link.
func (a *answer) write(dir *os.File, sc *redact.Scrubber) error {
	if err := writeAt(dir, "summary.txt", []byte(sc.Text(a.summary.String()))); err != nil {
		return err
	}
	status := "ok\n"
	if a.failed {
		status = "error\n"
	}
	if err := writeAt(dir, ".done", []byte(status)); err != nil {
		return err
	}
	return unix.Renameat(int(dir.Fd()), ".done", int(dir.Fd()), "done")
}

// createAt creates the file name in the folder dir, which must not
// exist, without following a link.
func createAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// writeAt is createAt, then data written.
func writeAt(dir *os.File, name string, data []byte) error {
	f, err := createAt(dir, name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
