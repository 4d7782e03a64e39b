package propose

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
)

// Bounds of the trajectory files of the agent's workspace. A search set
// of 256 tasks with 8 turns of a few KiB each is some 10 to 50 MiB per
// candidate; the bounds keep a long transcript or a long phase from
// filling the disk, and never drop an episode: past a bound an episode's
// line keeps its outcome and says why its messages and trace are left
// out ("omitted").
const (
	// agentEpisodeBytes bounds one line: a longer episode has each text
	// cut to agentClipText (head and tail kept, "clipped": true), and if
	// still longer, its messages and trace are omitted.
	agentEpisodeBytes = 1 << 20
	agentClipText     = 16 << 10
	// agentTrajectoryBytes bounds one candidate's trajectories.jsonl.
	agentTrajectoryBytes = 64 << 20
	// agentTrajectoriesBytes bounds all of them together.
	agentTrajectoriesBytes = 512 << 20
)

// trajectory is one line of a trajectories.jsonl: the rollout row (task
// id, sample, seed, reward, correct, graded answer, finish reason, error,
// turns, tokens, messages with their tool calls and reasoning, the trace
// of hook, model, tool and error events, the tools offered) without the
// token ids, and what the bounds did to it.
type trajectory struct {
	schemas.Rollout
	Clipped bool   `json:"clipped,omitempty"`
	Omitted string `json:"omitted,omitempty"`
}

// trajectoryLine encodes r as one JSON line of at most agentEpisodeBytes
// (plus its outcome when omitted is set: the messages and trace are then
// left out for that reason). Text holding one of sc's secret values is
// scrubbed (a model or tool that echoed one).
func trajectoryLine(r schemas.Rollout, omitted string, sc *redact.Scrubber) ([]byte, error) {
	r.Run = ""
	msgs := make([]schemas.Message, len(r.Messages))
	for i, m := range r.Messages {
		m.TokenIDs, m.PromptTokenIDs = nil, nil
		msgs[i] = m
	}
	r.Messages = msgs
	t := trajectory{Rollout: r}
	if omitted != "" {
		t.omit(omitted)
	}
	line, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	if len(line) > agentEpisodeBytes && omitted == "" {
		t.clip()
		if line, err = json.Marshal(t); err != nil {
			return nil, err
		}
		if len(line) > agentEpisodeBytes {
			t.omit(fmt.Sprintf("messages and trace left out: the episode is over %d bytes even with each text cut to %d", agentEpisodeBytes, agentClipText))
			if line, err = json.Marshal(t); err != nil {
				return nil, err
			}
		}
	}
	if sc.Holds(string(line)) {
		t.scrub(sc)
		if line, err = json.Marshal(t); err != nil {
			return nil, err
		}
	}
	return append(line, '\n'), nil
}

func (t *trajectory) omit(why string) {
	t.Messages, t.Trace, t.Tools = nil, nil, ""
	t.Answer, t.Error = clip(t.Answer, 500), clip(t.Error, 2000)
	t.Omitted = why
}

func (t *trajectory) clip() {
	for i := range t.Messages {
		m := &t.Messages[i]
		m.Content, m.Reasoning = clip(m.Content, agentClipText), clip(m.Reasoning, agentClipText)
		for j := range m.ToolCalls {
			m.ToolCalls[j].Arguments = clip(m.ToolCalls[j].Arguments, agentClipText)
		}
	}
	for i := range t.Trace {
		e := &t.Trace[i]
		e.Action, e.Feedback = clip(e.Action, agentClipText), clip(e.Feedback, agentClipText)
	}
	t.Answer, t.Error, t.Tools = clip(t.Answer, agentClipText), clip(t.Error, agentClipText), clip(t.Tools, agentClipText)
	t.Clipped = true
}

func (t *trajectory) scrub(sc *redact.Scrubber) {
	for i := range t.Messages {
		m := &t.Messages[i]
		m.Content, m.Reasoning = sc.Text(m.Content), sc.Text(m.Reasoning)
		for j := range m.ToolCalls {
			m.ToolCalls[j].Arguments = sc.Text(m.ToolCalls[j].Arguments)
		}
	}
	for i := range t.Trace {
		e := &t.Trace[i]
		e.Action, e.Feedback = sc.Text(e.Action), sc.Text(e.Feedback)
	}
	t.Answer, t.Error, t.Tools, t.TaskID = sc.Text(t.Answer), sc.Text(t.Error), sc.Text(t.Tools), sc.Text(t.TaskID)
}

// trajectoryFile is one candidate's trajectories.jsonl being written.
type trajectoryFile struct {
	f        *os.File
	w        *bufio.Writer
	bytes    int64
	episodes int
	omitted  int
}

// trajectoryBounds are the file bounds of writeTrajectories.
type trajectoryBounds struct{ file, total int64 }

var agentTrajectoryBounds = trajectoryBounds{file: agentTrajectoryBytes, total: agentTrajectoriesBytes}

// trajectoryStats is what writeTrajectories wrote, for the log.
type trajectoryStats struct {
	files, episodes, omitted int
	bytes                    int64
}

// writeTrajectories streams every search-set episode of the archive's
// evaluate stages into candidates/<dir>/trajectories.jsonl of the
// harness that played it, one JSON line per episode (trajectoryLine), in
// archive order: row by row, so memory holds one episode and a buffer
// per file, whatever the phase's size. Past agentTrajectoryBytes in a
// file, or agentTrajectoriesBytes in all, an episode's line keeps only
// its outcome. Rows of a test evaluation are never read: readArchive
// refuses one as an input, and rows of section "test" are skipped.
func writeTrajectories(ctx context.Context, x *stages.Exec, ws string, dirs map[string]string, sc *redact.Scrubber, b trajectoryBounds) (st trajectoryStats, err error) {
	files := map[string]*trajectoryFile{}
	defer func() {
		for _, tf := range files {
			if ferr := tf.w.Flush(); ferr != nil && err == nil {
				err = fmt.Errorf("propose: agent workspace %s: %w", tf.f.Name(), ferr)
			}
			if ferr := tf.f.Close(); ferr != nil && err == nil {
				err = fmt.Errorf("propose: agent workspace %s: %w", tf.f.Name(), ferr)
			}
		}
	}()
	for _, name := range archiveInputs(x) {
		m := x.Inputs[name]
		for _, f := range m.Table(schemas.Rollouts.Name) {
			ra, err := x.Open(ctx, m, f)
			if err != nil {
				return st, fmt.Errorf("propose: open archive %s: %w", m.FileKey(f), err)
			}
			err = schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
				dir := dirs[r.HarnessID]
				if dir == "" || r.Section == sectionTest {
					return nil
				}
				tf := files[dir]
				if tf == nil {
					p := filepath.Join(ws, "candidates", dir, "trajectories.jsonl")
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						return err
					}
					fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
					if err != nil {
						return err
					}
					tf = &trajectoryFile{f: fh, w: bufio.NewWriterSize(fh, 256<<10)}
					files[dir] = tf
					st.files++
				}
				fileFull := fmt.Sprintf("messages and trace left out: this file reached its bound of %d bytes", b.file)
				allFull := fmt.Sprintf("messages and trace left out: the workspace's trajectories reached their bound of %d bytes", b.total)
				omitted := ""
				switch {
				case tf.bytes >= b.file:
					omitted = fileFull
				case st.bytes >= b.total:
					omitted = allFull
				}
				line, err := trajectoryLine(r, omitted, sc)
				if err != nil {
					return fmt.Errorf("encode episode of task %s: %w", r.TaskID, err)
				}
				if omitted == "" {
					// A line that would pass a bound keeps its outcome only.
					switch {
					case tf.bytes+int64(len(line)) > b.file:
						omitted = fileFull
					case st.bytes+int64(len(line)) > b.total:
						omitted = allFull
					}
					if omitted != "" {
						if line, err = trajectoryLine(r, omitted, sc); err != nil {
							return err
						}
					}
				}
				if _, err := tf.w.Write(line); err != nil {
					return err
				}
				tf.bytes += int64(len(line))
				tf.episodes++
				st.episodes++
				st.bytes += int64(len(line))
				if omitted != "" {
					tf.omitted++
					st.omitted++
				}
				return nil
			})
			if err != nil {
				return st, fmt.Errorf("propose: agent trajectories from %s: %w", m.FileKey(f), err)
			}
		}
	}
	return st, nil
}

// sectionTest is the Section of a rollout row of a test evaluation.
const sectionTest = "test"

// errTestArchive marks an archive input that is a test evaluation: the
// proposer never sees test-split data.
var errTestArchive = errors.New("a test evaluation is not an archive input")

// checkNotTest refuses an evaluate stage of mode "test" as an archive
// input, by its frozen config.
func checkNotTest(name, dir, stage string, config json.RawMessage) error {
	if len(config) == 0 {
		return nil
	}
	var c struct {
		Mode string `json:"mode"`
	}
	if json.Unmarshal(config, &c) == nil && c.Mode == sectionTest {
		return fmt.Errorf("propose: input %s (%s, stage %s) evaluated the test split: %w; the proposer reads search-set evaluations only", name, dir, stage, errTestArchive)
	}
	return nil
}

// agentTaskIDs bounds search_tasks.txt: a search set is hundreds of
// tasks; the ids of a larger dataset past this many are left out.
const agentTaskIDs = 100000

// writeTaskList writes search_tasks.txt: the id of every task of the
// stage's tasks input (the search set), one a line, in the input's
// order, streamed; rows of the test split are never listed. It returns
// how many it wrote.
func writeTaskList(ctx context.Context, x *stages.Exec, ws string) (int, error) {
	in, err := x.Input("tasks")
	if err != nil {
		return 0, fmt.Errorf("propose: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(ws, "search_tasks.txt"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("propose: agent workspace: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	n := 0
	for _, file := range in.Table(schemas.Tasks.Name) {
		ra, err := x.Open(ctx, in, file)
		if err != nil {
			return n, fmt.Errorf("propose: open tasks %s: %w", in.FileKey(file), err)
		}
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(t schemas.Task) error {
			if t.Split == sectionTest || n >= agentTaskIDs {
				return nil
			}
			n++
			_, err := fmt.Fprintln(w, t.ID)
			return err
		})
		if err != nil {
			return n, fmt.Errorf("propose: read tasks %s: %w", in.FileKey(file), err)
		}
	}
	if err := w.Flush(); err != nil {
		return n, fmt.Errorf("propose: agent workspace: %w", err)
	}
	return n, f.Close()
}
