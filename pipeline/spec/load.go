package spec

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Reading an experiment file: Load, Read and Parse, on top of the
// decoder of decode.go.

// Load reads and parses the experiment file at path; errors name the path
// as given. Relative paths in it (see PathFields) are resolved against the
// file's directory: the Experiment holds absolute paths. A file that Read
// finds problems in is refused with them.
func Load(path string) (*Experiment, error) {
	d, err := Read(path)
	if err != nil {
		return nil, err
	}
	if problems := d.Problems(); len(problems) > 0 {
		return nil, problems
	}
	return d.Exp, nil
}

// Read reads the experiment file at path as Load does, but holds back
// judgement: the error is about reading or decoding the file (an
// ErrorList for what does not decode), and what validation and path
// resolution find is the Draft's Problems.
func Read(path string) (*Draft, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read experiment file: %w", err)
	}
	defer f.Close()
	// One byte past the bound is enough to refuse the file.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read experiment file: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read experiment file: %w", err)
	}
	return read(path, data, filepath.Dir(abs))
}

// Parse decodes an experiment file strictly on top of Defaults(), normalizes
// it and validates it. name is used in error messages only. On failure the
// error is an ErrorList naming every problem found with its position.
// Paths are left as written: Load resolves them.
func Parse(name string, data []byte) (*Experiment, error) {
	d, err := read(name, data, "")
	if err != nil {
		return nil, err
	}
	if problems := d.Problems(); len(problems) > 0 {
		return nil, problems
	}
	return d.Exp, nil
}

// read decodes and normalizes the file name holding data, with relative
// paths resolved against dir unless it is empty; the error is an
// ErrorList of what does not decode.
func read(name string, data []byte, dir string) (*Draft, error) {
	d := newDecoder(name, data)
	e := Defaults()
	d.decodeFile(data, &e)
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	e.Normalize()
	dr := &Draft{Exp: &e, Dir: dir, file: name, dec: d}
	if dir != "" {
		dr.written = map[string]string{}
		for _, f := range PathFields {
			dr.written[f] = *pathField(&e, f)
		}
		dr.pathErrs = dr.position(e.resolvePaths(dir))
	}
	return dr, nil
}

// position gives each problem found after decoding the file's name and
// the position of its field (or of the closest ancestor written), with
// the source line unless the value may be a secret.
func (dr *Draft) position(problems ErrorList) ErrorList {
	for _, ve := range problems {
		if dr.file != "" {
			ve.File = dr.file
		}
		if dr.dec == nil {
			continue
		}
		if p, ok := dr.dec.nearest(ve.Path); ok {
			ve.Line, ve.Column = p.line, p.col
			if !ve.sensitive {
				ve.Snippet = snippet(dr.dec.lines, p.line, p.col)
			}
		}
	}
	return problems
}
