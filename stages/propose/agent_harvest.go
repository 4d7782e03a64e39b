package propose

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/internal/redact"
)

// Limits of what the stage reads back from the agent's workspace.
const (
	// agentMaxEntries bounds the entries of new/: an agent that writes
	// more was told to write at most M ≤ MaxCandidates candidates, and
	// none of its output is read.
	agentMaxEntries = 4 * MaxCandidates
	// agentMetaBytes bounds each meta.json; harness.star is bounded by
	// harness.MaxSourceBytes.
	agentMetaBytes = 64 << 10
)

// meta is new/<name>/meta.json.
type meta struct {
	Name       string `json:"name"`
	Hypothesis string `json:"hypothesis"`
	Axis       string `json:"axis"`
}

// harvest reads new/<name>/harness.star and meta.json under ws, the
// workspace folder opened before the agent ran, in name order. Every file
// is opened once, without following a link, and checked as opened
// (fstat): a link, a FIFO, a device or a file over its limit is a
// rejection, and no read goes past the limit. A source that holds one of
// sc's secret values is refused without its source; the text the agent
// wrote (names, hypotheses, axes, and rejection reasons that quote them)
// comes back scrubbed by sc.
func harvest(ws *os.File, m int, sc *redact.Scrubber) (outcome, error) {
	out, err := harvestNew(ws, m, sc)
	for i := range out.proposals {
		p := &out.proposals[i]
		p.Name, p.Hypothesis, p.Axis = sc.Text(p.Name), sc.Text(p.Hypothesis), sc.Text(p.Axis)
	}
	for i := range out.rejected {
		r := &out.rejected[i]
		r.Name, r.Axis, r.Reason = sc.Text(r.Name), sc.Text(r.Axis), sc.Text(r.Reason)
	}
	return out, err
}

func harvestNew(ws *os.File, m int, sc *redact.Scrubber) (outcome, error) {
	var out outcome
	reject := func(name, kind, reason string) {
		out.rejected = append(out.rejected, Rejection{Name: name, Kind: kind, Reason: reason})
	}
	dir, err := openAt(ws, "new", unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return out, nil
	case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		reject("new", RejectProposalBad, fmt.Sprintf("new is %s, not a folder: nothing was harvested", describeAt(ws, "new")))
		return out, nil
	case err != nil:
		return out, fmt.Errorf("propose: harvest: %w", err)
	}
	defer dir.Close()
	entries, err := dir.ReadDir(agentMaxEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return out, fmt.Errorf("propose: harvest %s: %w", dir.Name(), err)
	}
	if len(entries) > agentMaxEntries {
		reject("new", RejectOverLimit, fmt.Sprintf("new/ holds more than %d entries (m = %d candidates were asked for): nothing was harvested", agentMaxEntries, m))
		return out, nil
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		rel := "new/" + e.Name()
		cand, err := openAt(dir, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			reject(e.Name(), RejectProposalBad, fmt.Sprintf("%s is %s, not a folder", rel, describeAt(dir, e.Name())))
			continue
		}
		p, rej := harvestOne(cand, e.Name(), sc)
		cand.Close()
		switch {
		case rej != nil:
			out.rejected = append(out.rejected, *rej)
		case len(out.proposals) == m:
			out.rejected = append(out.rejected, Rejection{Name: p.Name, Axis: p.Axis, Kind: RejectOverLimit,
				Reason: fmt.Sprintf("%s: more than m = %d candidates written", rel, m), Source: string(p.Source)})
		default:
			out.proposals = append(out.proposals, p)
		}
	}
	return out, nil
}

// harvestOne reads the candidate folder dir, new/<name>.
func harvestOne(dir *os.File, name string, sc *redact.Scrubber) (proposal, *Rejection) {
	rel := "new/" + name
	bad := func(reason, src string) (proposal, *Rejection) {
		return proposal{}, &Rejection{Name: name, Kind: RejectProposalBad, Reason: rel + "/" + reason, Source: src}
	}
	src, err := readAt(dir, "harness.star", harness.MaxSourceBytes)
	if err != nil {
		return bad(err.Error(), "")
	}
	if sc.Holds(string(src)) {
		return bad("harness.star holds the value of one of whale's secret environment variables: refused, and not stored", "")
	}
	p := proposal{Name: name, Source: src}
	data, err := readAt(dir, "meta.json", agentMetaBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return bad(err.Error(), string(src))
	}
	var md meta
	if err := json.Unmarshal(data, &md); err != nil {
		return bad(`meta.json: `+err.Error()+` (want {"name", "hypothesis", "axis"})`, string(src))
	}
	p.Name = cmpOr(md.Name, p.Name)
	p.Hypothesis, p.Axis = md.Hypothesis, md.Axis
	return p, nil
}

func cmpOr(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}

// fileError is a file of the workspace that the stage does not read; a
// missing one matches fs.ErrNotExist.
type fileError struct {
	msg     string
	missing bool
}

func (e *fileError) Error() string        { return e.msg }
func (e *fileError) Is(target error) bool { return e.missing && target == fs.ErrNotExist }

// readAt reads the regular file name of the folder dir, of at most limit
// bytes. It opens the file once, not following a link and not waiting
// for a FIFO's writer, checks what it opened, and reads at most limit+1
// bytes of it, so that a file that grows while read is still refused.
func readAt(dir *os.File, name string, limit int64) ([]byte, error) {
	f, err := openAt(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &fileError{msg: "no " + name, missing: true}
	case err != nil:
		return nil, &fileError{msg: fmt.Sprintf("%s is %s, not a regular file", name, describeAt(dir, name))}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &fileError{msg: fmt.Sprintf("%s: %v", name, err)}
	}
	if !st.Mode().IsRegular() {
		return nil, &fileError{msg: fmt.Sprintf("%s is %s, not a regular file", name, describeMode(st.Mode()))}
	}
	if st.Size() > limit {
		return nil, &fileError{msg: fmt.Sprintf("%s is %d bytes, more than the limit of %d", name, st.Size(), limit)}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fileError{msg: fmt.Sprintf("%s: %v", name, err)}
	}
	if int64(len(data)) > limit {
		return nil, &fileError{msg: fmt.Sprintf("%s grew past the limit of %d bytes while it was read", name, limit)}
	}
	return data, nil
}

// openAt opens name in the folder dir (no path: one name) without
// following a link, even one that stays inside dir.
func openAt(dir *os.File, name string, flags int) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, &fs.PathError{Op: "openat", Path: name, Err: unix.EINVAL}
	}
	var fd int
	var err error
	for {
		fd, err = unix.Openat(int(dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// describeAt says what name in dir is ("a symbolic link", "a named
// pipe"), for a rejection: a guess, taken without following a link.
func describeAt(dir *os.File, name string) string {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "unreadable"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFDIR:
		return "a folder"
	case unix.S_IFREG:
		return "a file"
	}
	return "not a file"
}

// describeMode is describeAt for what the stage has opened.
func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a folder"
	}
	return "not a regular file"
}
