package importers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/whalerun/whale/schemas"
)

// Input is a file opened for import. A regular file is read where it is.
// Anything else (a FIFO, a character device, /dev/stdin, a shell's
// <(zcat …)) can be read only once, yet an import reads it more than once
// (to detect its format, to hash it, to import it), so OpenInput first
// copies it into a temporary file, which Close removes. Either way what
// is read is bounded: Options.MaxInputBytes for the file, and for a
// text file copied, Options.MaxLineBytes for each line as it comes in
// (so that /dev/zero ends at the first bound rather than filling the
// disk). Every read checks the context.
type Input struct {
	name string // the path as given: messages and generated ids use it
	path string // the regular file read: name itself, or the copy
	size int64
	max  int64  // Options.MaxInputBytes at open
	tmp  string // the copy's directory; "" for a regular file
}

// OpenInput opens the file at path for import (see Input).
func OpenInput(ctx context.Context, path string, opts Options) (*Input, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	max := opts.maxInput()
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s: a directory, not a file to import", path)
	case st.Mode().IsRegular():
		if st.Size() > max {
			return nil, &Error{File: path, Row: -1, Msg: fmt.Sprintf("the file is %d bytes, more than the %d an import reads; split it into smaller files", st.Size(), max)}
		}
		return &Input{name: path, path: path, size: st.Size(), max: max}, nil
	}
	return spool(ctx, path, opts)
}

// Name is the path as given to OpenInput.
func (in *Input) Name() string { return in.name }

// Size is the bytes of the file (as read, for one that is not regular).
func (in *Input) Size() int64 { return in.size }

// Close removes the copy of a file that is not regular.
func (in *Input) Close() error {
	if in.tmp == "" {
		return nil
	}
	return os.RemoveAll(in.tmp)
}

// Open returns the file's bytes as stored (not decompressed), for a
// digest; reads fail once ctx is done.
func (in *Input) Open(ctx context.Context) (io.ReadCloser, error) {
	f, err := os.Open(in.path)
	if err != nil {
		return nil, in.rename(err)
	}
	return &stackCloser{Reader: &boundedReader{ctx: ctx, r: f, max: in.max, what: whatFile}, closers: []io.Closer{f}}, nil
}

// Detect names the format of the file as Detect does.
func (in *Input) Detect() (Format, error) {
	return detect(in.path, in.name)
}

// Import imports the file in format f (FormatUnknown: Detect it), as
// ImportFile does.
func (in *Input) Import(ctx context.Context, f Format, opts Options, fn func(schemas.Task) error) error {
	if f == FormatUnknown {
		var err error
		if f, err = in.Detect(); err != nil {
			return err
		}
	}
	if f == FormatVerl {
		if _, kind := compression(in.name); kind != "" {
			return fmt.Errorf("%s: Parquet files are compressed inside; decompress the %s file first", in.name, kind)
		}
		file, err := os.Open(in.path)
		if err != nil {
			return in.rename(err)
		}
		defer file.Close()
		return VerlParquet(ctx, file, in.size, in.name, opts, fn)
	}
	file, err := os.Open(in.path)
	if err != nil {
		return in.rename(err)
	}
	defer file.Close()
	max := opts.maxInput()
	var r io.Reader = &boundedReader{ctx: ctx, r: file, max: max, what: whatFile}
	if _, kind := compression(in.name); kind != "" {
		rc, err := decompress(r, kind, in.name)
		if err != nil {
			return err
		}
		defer rc.Close()
		r = &boundedReader{ctx: ctx, r: rc, max: max, what: whatDecompressed}
	}
	switch f {
	case FormatJSONL:
		return JSONL(ctx, r, in.name, opts, fn)
	case FormatLichess:
		return LichessCSV(ctx, r, in.name, opts, fn)
	}
	return fmt.Errorf("%s: unsupported format %v", in.name, f)
}

// rename makes an error about the copy name the file as given.
func (in *Input) rename(err error) error {
	var pe *os.PathError
	if in.tmp != "" && errors.As(err, &pe) {
		return &os.PathError{Op: pe.Op, Path: in.name, Err: pe.Err}
	}
	return err
}

// spool copies the file at path, which is not regular, into a temporary
// file named as it is (so that its extension still tells its format),
// with the bounds of Input.
func spool(ctx context.Context, path string, opts Options) (in *Input, err error) {
	src, err := openCtx(ctx, path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// A read blocked on a FIFO whose writer says nothing ends when ctx
	// does (regular files and devices that cannot wait ignore this).
	stop := context.AfterFunc(ctx, func() { _ = src.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	dir, err := os.MkdirTemp("", "whale-import-")
	if err != nil {
		return nil, fmt.Errorf("%s: copy for reading: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	base := filepath.Base(path)
	if base == "." || base == string(filepath.Separator) {
		base = "input"
	}
	dst, err := os.Create(filepath.Join(dir, base))
	if err != nil {
		return nil, fmt.Errorf("%s: copy for reading: %w", path, err)
	}
	defer dst.Close()
	br := &boundedReader{ctx: ctx, r: src, max: opts.maxInput(), what: whatFile}
	lc := &lineCheck{max: opts.maxLine(), name: path}
	n, err := io.Copy(io.MultiWriter(dst, lc), br)
	if err == nil {
		err = lc.err
	}
	if err != nil {
		var le *Error
		var tb *tooBigError
		switch {
		case errors.As(err, &le):
			return nil, le
		case errors.As(err, &tb):
			return nil, &Error{File: path, Row: -1, Msg: tb.Error()}
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx))
		}
		return nil, fmt.Errorf("%s: read: %w", path, err)
	}
	if err := dst.Close(); err != nil {
		return nil, fmt.Errorf("%s: copy for reading: %w", path, err)
	}
	return &Input{name: path, path: dst.Name(), size: n, max: opts.maxInput(), tmp: dir}, nil
}

// openCtx opens path for reading, giving up when ctx ends: opening a FIFO
// waits for a writer.
func openCtx(ctx context.Context, path string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := os.Open(path)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-ctx.Done():
		go func() {
			// The open returns when a writer comes, or never.
			if r := <-done; r.f != nil {
				r.f.Close()
			}
		}()
		return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx))
	}
}

// lineCheck is a writer that refuses, as they come, lines longer than max
// in text: a stream that starts like a compressed file or Parquet is not
// looked at.
type lineCheck struct {
	max    int
	name   string
	sniff  []byte
	binary bool
	line   int   // 1-based number of the current line
	cur    int   // bytes of the current line so far
	err    error // the refusal, once made
	// off counts the bytes checked as UTF-8; carry holds the start of a
	// rune a write cut (at most 3 bytes). Text that is not UTF-8 (a
	// device of random bytes) is refused at its first bad byte instead of
	// being copied up to the input bound.
	off   int64
	carry []byte
	early []byte // the first bytes, while the sniff is short
}

// Magic numbers of the binary formats an import reads.
var binaryMagic = [][]byte{{0x1f, 0x8b}, {0x28, 0xb5, 0x2f, 0xfd}, []byte("PAR1")}

func (c *lineCheck) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.line == 0 {
		c.line = 1
	}
	if len(c.sniff) < 4 {
		// Reads from a pipe may come a byte at a time.
		c.sniff = append(c.sniff, p[:min(len(p), 4-len(c.sniff))]...)
		for _, m := range binaryMagic {
			if len(c.sniff) == 4 && bytes.HasPrefix(c.sniff, m) {
				c.binary = true
			}
		}
	}
	if c.binary {
		return len(p), nil
	}
	// Until the sniff has its 4 bytes the stream may still prove binary.
	check := p
	switch {
	case len(c.sniff) < 4:
		c.early, check = append(c.early, p...), nil
	case c.early != nil:
		check, c.early = append(c.early, p...), nil
	}
	if err := c.checkUTF8(check); err != nil {
		c.err = err
		return 0, err
	}
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			c.cur += len(rest)
			break
		}
		c.cur += i
		if c.cur > c.max {
			break
		}
		c.line++
		c.cur = 0
		rest = rest[i+1:]
	}
	if c.cur > c.max {
		c.err = lineErr(c.name, c.line, "line is longer than %d bytes, the most one task may take (is the file what it should be?)", c.max)
		return 0, c.err
	}
	return len(p), nil
}

// checkUTF8 checks p, after what earlier writes left unfinished, as
// UTF-8, counting lines of its own so that the error names the line.
func (c *lineCheck) checkUTF8(p []byte) error {
	b := p
	if len(c.carry) > 0 {
		b = append(c.carry, p...)
		c.off -= int64(len(c.carry))
		c.carry = nil
	}
	line := c.line
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			if b[i] == '\n' {
				line++
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			if !utf8.FullRune(b[i:]) {
				// A rune the next write may finish.
				c.carry = append([]byte(nil), b[i:]...)
				c.off += int64(i)
				return nil
			}
			return lineErr(c.name, line, "not UTF-8 text: byte %d of the file is 0x%02x (is the file what it should be?)", c.off+int64(i), b[i])
		}
		i += n
	}
	c.off += int64(len(b))
	return nil
}

const (
	whatFile         = "the file holds"
	whatDecompressed = "the file decompresses to"
)

// boundedReader reads r until max bytes have come and fails with a
// *tooBigError past them; every read fails once ctx is done.
type boundedReader struct {
	ctx  context.Context
	r    io.Reader
	n    int64
	max  int64
	what string // whatFile or whatDecompressed
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.ctx.Err() != nil {
		return 0, context.Cause(b.ctx)
	}
	if b.n > b.max {
		return 0, &tooBigError{what: b.what, max: b.max}
	}
	if rest := b.max - b.n + 1; int64(len(p)) > rest {
		p = p[:rest] // one byte past the bound is enough to know
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return n, &tooBigError{what: b.what, max: b.max}
	}
	return n, err
}

// tooBigError is a file past Options.MaxInputBytes.
type tooBigError struct {
	what string
	max  int64
}

func (e *tooBigError) Error() string {
	return fmt.Sprintf("%s more than %d bytes, the most an import reads; split it into smaller files", e.what, e.max)
}
