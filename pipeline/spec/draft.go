package spec

import (
	"os"
	"path/filepath"
	"slices"
)

// A Draft is an experiment file decoded strictly and normalized, but not
// yet held to validation: Load refuses a file whose draft has Problems,
// and `whale init` compares a draft with the run it names first
// (Reinit), so that a run frozen by an older whale, whose checks its spec
// passed, can be initialized again from its own file when today's checks
// refuse it.
type Draft struct {
	// Exp is the experiment, normalized, with relative paths resolved
	// against Dir where they resolve. Set Exp.Name before Problems to
	// override the file's name.
	Exp *Experiment
	// Dir is the experiment file's directory; "" for a draft of an
	// Experiment built in Go (DraftOf) or parsed without a file.
	Dir string

	file string
	dec  *decoder // positions of the fields written; nil for DraftOf
	// written are the path fields as the file writes them, by field.
	written map[string]string
	// pathErrs are what resolving them found, positioned.
	pathErrs ErrorList
}

// DraftOf is the draft of an experiment built in Go (whale demo): a
// normalized copy of e, its problems named after file.
func DraftOf(e *Experiment, file string) *Draft {
	c := e.Clone()
	c.Normalize()
	return &Draft{Exp: c, file: file}
}

// Problems lists everything validation and path resolution find in the
// draft, in field order then path fields, each with its position in the
// file: none for a spec that Freeze takes.
func (dr *Draft) Problems() ErrorList {
	return append(dr.position(dr.Exp.validate()), dr.pathErrs...)
}

// Reinit compares the draft with run, the run of its name that exists
// already, for an init run again from cwd.
//
// When the draft is the run's spec (CheckSameAt, relative paths of a run
// frozen before whale resolved them read from the file's directory or
// cwd), Reinit returns the experiment as compared, whose inputs the
// caller compares with the run's, and as warnings what Problems finds in
// it: checks added since the run was frozen (a bound, the secret scan)
// cannot unmake a run that exists, and refusing its own file would leave
// it impossible to init again. When it is not, the error is the problems
// when there are any (an ErrorList: the file is bad input), else the
// *MismatchError.
//
// A path that does not resolve on this machine is refused either way
// (an ErrorList), with one exception: an older whale froze relative
// paths as written and read them from the working directory, so when the
// file's directory does not hold such a path but cwd does, and the run
// holds that very path, it is taken from cwd, as that init did, rather
// than refused as a new run's would be.
func (dr *Draft) Reinit(run *Run, cwd string) (*Experiment, ErrorList, error) {
	e := dr.Exp.Clone()
	pathErrs := slices.Clone(dr.pathErrs)
	if dr.Dir != "" && cwd != "" {
		for _, f := range PathFields {
			w, old := dr.written[f], *pathField(&run.Spec, f)
			if w == "" || old == "" || filepath.IsAbs(w) || filepath.IsAbs(old) || !fromCwd(dr.Dir, cwd, w, old) {
				continue
			}
			*pathField(e, f) = filepath.Join(cwd, w)
			pathErrs = slices.DeleteFunc(pathErrs, func(pe *Error) bool { return pe.Path == f })
		}
	}
	if len(pathErrs) > 0 {
		// What this machine's files say is no check of the spec that
		// the run passed once: a path that does not resolve is refused.
		return nil, nil, pathErrs
	}
	problems := dr.position(e.validate())
	if err := CheckSameAt(run, e, dr.Dir, cwd); err != nil {
		if len(problems) > 0 {
			return nil, nil, problems
		}
		return nil, nil, err
	}
	return e, problems, nil
}

// fromCwd reports whether the relative path w of a file in dir is, for a
// run that holds the relative path old, to be read from cwd: dir does not
// hold it, cwd does, and old names the same place from there.
func fromCwd(dir, cwd, w, old string) bool {
	if _, err := os.Stat(filepath.Join(dir, w)); err == nil {
		return false
	}
	p := filepath.Join(cwd, w)
	if filepath.Join(cwd, old) != p {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}
