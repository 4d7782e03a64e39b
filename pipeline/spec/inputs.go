package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Paths in an experiment file.
//
// Of the experiment's fields only model.checkpoint names something on the
// machine that runs whale: a checkpoint file or directory (or else a hub
// name such as Qwen/Qwen3-8B, or a URL, passed through untouched). The
// commands are shell text, not paths: the trainer and reload commands
// (finetune.command, finetune.reload_command) run in Run.Dir, the
// directory `whale init` ran in, wherever whale runs from; the coding
// agent (harness.agent.command) runs in its workspace. data.* name
// datasets in the root and tools.* name services or stored indexes.
//
// Load resolves a relative path against the experiment file's directory,
// so that the frozen spec holds an absolute path and a run does not depend
// on the directory it is started from. A run frozen before whale did so
// holds the path as written (see LegacyPaths); `whale init` again
// compares it from the file's directory or its own (Draft.Reinit). Init then records what the path
// held (see Input): a file up to CopyLimit bytes (the built-in model's
// checkpoints are a few MB) is copied into the bucket with its sha256; a
// larger file or a directory (a Hugging Face checkpoint) stays where it
// is, pinned by a digest of its listing (names and sizes) and of the
// contents of its *.json files (config.json, model.safetensors.index.json,
// tokenizer files). CheckInputs compares the path with that record.

// PathFields are the experiment fields that may name a local file or
// directory.
var PathFields = []string{"model.checkpoint"}

// CopyLimit is the largest input file that init copies into the bucket.
const CopyLimit = 64 << 20

// Kinds of Input.
const (
	// InputCopied is a file copied into the bucket at init.
	InputCopied = "copied"
	// InputPinned is a large file or a directory left where it is, pinned
	// by the digest of its listing.
	InputPinned = "pinned"
)

// Limits of a pinned directory's listing.
const (
	maxPinnedFiles = 100000
	// maxHashedJSON bounds the *.json files whose contents are hashed
	// (tokenizer.json runs to ~10 MB); bigger ones count by size.
	maxHashedJSON = 32 << 20
	// headBytes of a large single file are hashed with its size.
	headBytes = 1 << 20
)

// Input is a file or directory outside the bucket that a run reads,
// as init found it. run.json lists them next to the spec (not in it: the
// spec is what the file says, its inputs are what the paths held).
type Input struct {
	// Field is the experiment field that names it: "model.checkpoint".
	Field string `json:"field"`
	// Path is the absolute path the frozen spec holds.
	Path string `json:"path"`
	// Kind is InputCopied or InputPinned.
	Kind string `json:"kind"`
	// Digest is "sha256:<hex>": of the file's bytes when copied; when
	// pinned, of its listing (see the package's notes on paths).
	Digest string `json:"digest"`
	// Size is the file's bytes, or the sum over a directory's files.
	Size int64 `json:"size"`
	// Files counts a directory's files; 0 for a file.
	Files int `json:"files,omitempty"`
	// Key is where the copy is in the bucket (InputCopied):
	// inputs/<sha256 hex>/<file name>, shared by every run of the root
	// that reads the same bytes.
	Key string `json:"key,omitempty"`
}

// ErrInputChanged is matched by an *InputChangedError. It wraps
// ErrSpecMismatch: a run whose input is not what init froze is a run with
// another spec.
var ErrInputChanged = fmt.Errorf("%w: an input differs from the one frozen at init", ErrSpecMismatch)

// InputChangedError says that the path of an input no longer holds what
// init froze.
type InputChangedError struct {
	Run   string
	Input Input
	// Now is the digest of what the path holds now.
	Now string
}

func (e *InputChangedError) Error() string {
	in := e.Input
	var b strings.Builder
	fmt.Fprintf(&b, "run %q: %s %s has changed since init froze it (%s, now %s)", e.Run, in.Field, in.Path, in.Digest, e.Now)
	if in.Key != "" {
		fmt.Fprintf(&b, "; the copy made at init is in the bucket at %s", in.Key)
	}
	b.WriteString(": restore it, or init a new run for the new one")
	return b.String()
}

func (e *InputChangedError) Unwrap() error { return ErrInputChanged }

// ReadInputs records the inputs that e's path fields name: every absolute
// path that exists (a hub name, a URL or a path missing on this machine is
// no input). For a copied input it also returns the file's bytes, by Key,
// read once so that what is copied is what was hashed.
func ReadInputs(e *Experiment) ([]Input, map[string][]byte, error) {
	var ins []Input
	data := map[string][]byte{}
	for _, f := range PathFields {
		p := *pathField(e, f)
		if !filepath.IsAbs(p) {
			continue
		}
		in, b, err := readInput(f, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", f, p, err)
		}
		ins = append(ins, in)
		if b != nil {
			data[in.Key] = b
		}
	}
	return ins, data, nil
}

// CheckInputs compares every input of the run with what its path holds
// on this machine; the first that differs is an *InputChangedError. A
// path this machine does not have is not checked: a job that does not
// read it (a rollout on a node without the trainer's disk) runs, and one
// that does fails reading it, naming it. Runs frozen before whale
// recorded inputs have none to check.
func (r *Run) CheckInputs() error {
	for _, in := range r.Inputs {
		now, _, err := readInput(in.Field, in.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("run %q: check %s %s: %w", r.Spec.Name, in.Field, in.Path, err)
		case now.Digest != in.Digest || now.Kind != in.Kind:
			return &InputChangedError{Run: r.Spec.Name, Input: in, Now: now.Digest}
		}
	}
	return nil
}

// CheckInputsSame compares the inputs a new init read (given) with those
// of the run, field by field; the first difference is an
// *InputChangedError. A field that either side has no input for (a run
// frozen before whale recorded inputs, a path missing on one machine) is
// not compared: Unchecked lists the run's.
func (r *Run) CheckInputsSame(given []Input) error {
	for _, in := range r.Inputs {
		i := slices.IndexFunc(given, func(g Input) bool { return g.Field == in.Field })
		if i >= 0 && (given[i].Digest != in.Digest || given[i].Kind != in.Kind) {
			return &InputChangedError{Run: r.Spec.Name, Input: in, Now: given[i].Digest}
		}
	}
	return nil
}

// Unchecked lists the run's inputs that given (what an init read on this
// machine) has no input for: paths this machine does not have.
func (r *Run) Unchecked(given []Input) []Input {
	var out []Input
	for _, in := range r.Inputs {
		if !slices.ContainsFunc(given, func(g Input) bool { return g.Field == in.Field }) {
			out = append(out, in)
		}
	}
	return out
}

func readInput(field, p string) (Input, []byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return Input{}, nil, err
	}
	in := Input{Field: field, Path: p}
	switch {
	case fi.Mode().IsRegular() && fi.Size() <= CopyLimit:
		b, err := os.ReadFile(p)
		if err != nil {
			return Input{}, nil, err
		}
		sum := sha256.Sum256(b)
		in.Kind, in.Digest, in.Size = InputCopied, "sha256:"+hex.EncodeToString(sum[:]), int64(len(b))
		in.Key = "inputs/" + hex.EncodeToString(sum[:]) + "/" + keyName(filepath.Base(p))
		return in, b, nil
	case fi.Mode().IsRegular():
		line, err := listingLine(p, filepath.Base(p), fi.Size(), true)
		if err != nil {
			return Input{}, nil, err
		}
		in.Kind, in.Digest, in.Size = InputPinned, sha256Digest([]byte(line)), fi.Size()
		return in, nil, nil
	case fi.IsDir():
		listing, size, files, err := listDir(p)
		if err != nil {
			return Input{}, nil, err
		}
		in.Kind, in.Digest, in.Size, in.Files = InputPinned, sha256Digest(listing), size, files
		return in, nil, nil
	}
	return Input{}, nil, fmt.Errorf("%s is neither a file nor a directory", p)
}

// listDir writes one line per file under dir (symbolic links followed,
// those to directories listed but not entered), sorted by relative path:
// "<path>\t<size>\t<sha256 of the contents, for *.json files>".
func listDir(dir string) (listing []byte, size int64, files int, err error) {
	var lines []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := os.Stat(p) // follows links, as the trainer will
		if err != nil {
			return err
		}
		if fi.IsDir() {
			lines = append(lines, rel+"/\tlink\n")
			return nil
		}
		if files++; files > maxPinnedFiles {
			return fmt.Errorf("more than %d files: not a checkpoint directory?", maxPinnedFiles)
		}
		size += fi.Size()
		line, err := listingLine(p, rel, fi.Size(), false)
		if err != nil {
			return err
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		return nil, 0, 0, err
	}
	slices.Sort(lines)
	return []byte(strings.Join(lines, "")), size, files, nil
}

// listingLine is the line of one file: its name and size, with the digest
// of its contents for a *.json file up to maxHashedJSON bytes, or of its
// first headBytes when head is set (a large single file).
func listingLine(p, name string, size int64, head bool) (string, error) {
	n := int64(0)
	switch {
	case head:
		n = min(size, headBytes)
	case strings.EqualFold(path.Ext(name), ".json") && size <= maxHashedJSON:
		n = size
	}
	sum := "-"
	if n > 0 {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.CopyN(h, f, n); err != nil {
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		sum = hex.EncodeToString(h.Sum(nil))
		if head {
			sum = "head:" + sum
		}
	}
	return fmt.Sprintf("%s\t%d\t%s\n", name, size, sum), nil
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// keyName is a file name that is safe as the last segment of a key.
func keyName(base string) string {
	var b strings.Builder
	for _, r := range base {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.Trim(b.String(), ".")
	if s == "" || strings.HasSuffix(s, ".attrs") || strings.HasSuffix(s, ".tmp") {
		s = "input"
	}
	return s
}

// PathValue returns the value of e's path field f, one of PathFields.
func PathValue(e *Experiment, f string) string { return *pathField(e, f) }

// pathField returns the address of the field called f, one of PathFields.
func pathField(e *Experiment, f string) *string {
	switch f {
	case "model.checkpoint":
		return &e.Model.Checkpoint
	}
	panic("spec: no path field " + f)
}

// resolvePaths makes the path fields of a parsed experiment absolute,
// relative paths read from dir, the experiment file's directory (see the
// notes on paths). A value that is no path (a hub name, a URL) is left
// alone.
func (e *Experiment) resolvePaths(dir string) ErrorList {
	c := &checker{}
	for _, f := range PathFields {
		p := pathField(e, f)
		// Only the built-in model takes nothing but a path.
		mustBePath := f == "model.checkpoint" && e.Model.Provider == ProviderLocal
		abs, msg := resolvePath(dir, *p, mustBePath)
		if msg != "" {
			c.add(f, "%s", msg)
			continue
		}
		*p = abs
	}
	return c.errs
}

// resolvePath resolves ref against dir: it returns the absolute path, or
// ref itself when it names no path, or a message saying what is wrong.
func resolvePath(dir, ref string, mustBePath bool) (string, string) {
	switch {
	case ref == "" || strings.Contains(ref, "://"):
		return ref, ""
	case filepath.IsAbs(ref):
		// An absolute path may name a place this machine does not see
		// (a compute node's disk): it is kept, and only pinned when it
		// exists.
		return filepath.Clean(ref), ""
	case ref == "~" || strings.HasPrefix(ref, "~/"):
		return "", fmt.Sprintf("%q: ~ is not expanded; write the absolute path", ref)
	}
	p := filepath.Join(dir, ref)
	explicit := ref == "." || ref == ".." || strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../")
	if _, err := os.Stat(p); err == nil {
		return p, ""
	}
	if cwd, err := os.Getwd(); err == nil && filepath.Clean(cwd) != filepath.Clean(dir) {
		if _, err := os.Stat(filepath.Join(cwd, ref)); err == nil {
			return "", fmt.Sprintf("%q is not in the experiment file's directory %s but in the working directory %s; relative paths are read from the experiment file's directory: write it relative to that directory, or as an absolute path",
				ref, dir, cwd)
		}
	}
	if explicit || mustBePath {
		return "", fmt.Sprintf("%s does not exist (relative paths are read from the experiment file's directory, %s)", p, dir)
	}
	return ref, "" // a name, such as a hub id
}

// CheckSameAt is CheckSame for an experiment read from a file, where
// dirs are the directories a relative path of a run frozen before whale
// resolved paths at init was read from: the file's directory and the
// directory init runs in. Such a run holds the path as written, read at
// run time from the working directory; it is the same as the
// experiment's when it resolves to it from one of dirs, as it does for a
// run started from there (see LegacyPaths).
func CheckSameAt(run *Run, exp *Experiment, dirs ...string) error {
	stored := run.Spec.Clone()
	for _, l := range LegacyPaths(run, exp, dirs...) {
		*pathField(stored, l.Field) = *pathField(exp, l.Field)
	}
	return checkSame(run, stored, exp)
}

// A LegacyPath is a path field in which a run frozen before whale
// resolved paths at init holds a relative path, and the directory from
// which it resolves to the path an experiment holds. Such a run still
// reads the path from the working directory of each `whale run`.
type LegacyPath struct {
	Field string // one of PathFields
	Dir   string
}

// LegacyPaths lists the path fields in which run holds a relative path
// that resolves to the absolute path exp holds from one of dirs (the
// first that does; empty ones are skipped).
func LegacyPaths(run *Run, exp *Experiment, dirs ...string) []LegacyPath {
	var out []LegacyPath
	for _, f := range PathFields {
		old, now := *pathField(&run.Spec, f), *pathField(exp, f)
		if old == "" || filepath.IsAbs(old) || !filepath.IsAbs(now) {
			continue
		}
		for _, dir := range dirs {
			if dir != "" && filepath.Join(dir, old) == now {
				out = append(out, LegacyPath{Field: f, Dir: dir})
				break
			}
		}
	}
	return out
}
