package importers

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/whalerun/whale/schemas"
)

// lichessColumns is the header of the Lichess puzzle database; dumps before
// 2022 lack the last column.
var lichessColumns = []string{
	"PuzzleId", "FEN", "Moves", "Rating", "RatingDeviation", "Popularity",
	"NbPlays", "Themes", "GameUrl", "OpeningTags",
}

const (
	colID = iota
	colFEN
	colMoves
	colRating
	colRatingDeviation
	colPopularity
	colNbPlays
	colThemes
	colGameURL
	colOpeningTags
)

// LichessMeta is the Meta of a task imported from the Lichess puzzle CSV.
// FEN is the position before the opponent's move Moves[0]; the solver plays
// Moves[1], Moves[3], ...
type LichessMeta struct {
	FEN             string   `json:"fen"`
	Moves           []string `json:"moves"`
	Rating          int      `json:"rating"`
	RatingDeviation int      `json:"rating_deviation"`
	Popularity      int      `json:"popularity"`
	NbPlays         int      `json:"nb_plays"`
	Themes          []string `json:"themes"`
	GameURL         string   `json:"game_url"`
	OpeningTags     []string `json:"opening_tags"`
}

// LichessCSV reads the Lichess puzzle CSV (with or without the OpeningTags
// column, with or without the header line) and calls fn with one chess task
// per puzzle: ID = PuzzleId, Question = FEN, Answers = [Moves as one
// space-separated UCI line], Meta = LichessMeta. Options.Domain, if set,
// must be "chess".
func LichessCSV(ctx context.Context, r io.Reader, name string, opts Options, fn func(schemas.Task) error) error {
	domain := "chess"
	if opts.Domain != "" && opts.Domain != domain {
		return fmt.Errorf("%s: Lichess puzzles are domain chess, not %q", name, opts.Domain)
	}
	if msg := opts.unknownDomain(domain); msg != "" {
		return fmt.Errorf("%s: Lichess puzzles are domain chess: %s", name, msg)
	}
	// encoding/csv holds a whole record in memory however long it is (an
	// unclosed quote makes the rest of the file one field): cr reads
	// through rb, which refuses a record longer than MaxLineBytes.
	rb := &recordBound{ctx: ctx, r: r, max: int64(opts.maxLine())}
	cr := csv.NewReader(rb)
	cr.ReuseRecord = true
	// Column counts are checked here, against the header, for a clearer
	// message than encoding/csv's.
	cr.FieldsPerRecord = -1
	ncols := 0
	for n := 0; ; n++ {
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			var tb *tooBigError
			switch {
			case errors.Is(err, errRecordTooLong):
				after := "it is the first record"
				if n > 0 {
					after = fmt.Sprintf("it starts after the record of line %d", rb.lastLine)
				}
				e := lineErr(name, rb.line(), "a CSV record longer than %d bytes, the most one task may take (%s; an unclosed quote?)", rb.max, after)
				e.Err = err
				return e
			case errors.As(err, &tb):
				return lineErr(name, rb.line(), "%s", tb.Error())
			case ctx.Err() != nil:
				return fmt.Errorf("%s:%d: %w", name, rb.line(), err)
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				e := lineErr(name, pe.Line, "invalid CSV: %v", pe.Err)
				e.Col, e.Err = pe.Column, err
				return e
			}
			return fmt.Errorf("%s: read: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		rb.mark(cr.InputOffset(), line)
		for i, f := range rec {
			if off := badUTF8(f); off >= 0 {
				l, c := cr.FieldPos(i)
				col := fmt.Sprintf("column %d", i+1)
				if i < len(lichessColumns) {
					col = "column " + lichessColumns[i]
				}
				e := lineErr(name, l, "%s: %s", col, utf8Msg(f[off], off, "field"))
				e.Col = c + off
				return e
			}
		}
		if n == 0 {
			rec[0] = strings.TrimPrefix(rec[0], string(utf8BOM))
			headerless := rec[0] != "PuzzleId" && (len(rec) == 9 || len(rec) == 10) && checkFEN(rec[colFEN]) == ""
			if !headerless {
				if err := checkHeader(rec); err != "" {
					return lineErr(name, line, "unexpected header: %s", err)
				}
				ncols = len(rec)
				continue
			}
			ncols = len(rec)
		}
		if len(rec) != ncols {
			return lineErr(name, line, "expected %d columns as in the first line, found %d", ncols, len(rec))
		}
		task, perr := puzzleTask(cr, rec, name, line, domain, opts.Split)
		if perr != nil {
			return perr
		}
		if err := fn(task); err != nil {
			return callbackErr(name, line, -1, err)
		}
	}
}

// errRecordTooLong is recordBound's refusal.
var errRecordTooLong = errors.New("CSV record too long")

// recordBound reads r for a csv.Reader and fails once more than max bytes
// (plus what the csv.Reader reads ahead) have come since the end of the
// last record it returned, or once ctx is done. It counts the lines it
// passes, for messages.
type recordBound struct {
	ctx      context.Context
	r        io.Reader
	max      int64
	n        int64 // bytes read
	start    int64 // offset of the end of the last record
	lines    int   // newlines read
	lastLine int   // line of the last record returned
}

// readAhead bounds what csv.Reader's bufio.Reader reads past a record.
const readAhead = 64 << 10

func (b *recordBound) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, context.Cause(b.ctx)
	}
	if b.n-b.start > b.max+readAhead {
		return 0, errRecordTooLong
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	b.lines += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

// mark records that the csv.Reader returned the record of line that ends
// at offset.
func (b *recordBound) mark(offset int64, line int) { b.start, b.lastLine = offset, line }

// line is the line being read: the one after the last newline read.
func (b *recordBound) line() int { return b.lines + 1 }

func checkHeader(rec []string) string {
	if len(rec) != 9 && len(rec) != 10 {
		return fmt.Sprintf("found %d columns (%s), expected %s with optional %s",
			len(rec), quote(strings.Join(rec, ",")), strings.Join(lichessColumns[:9], ","), lichessColumns[9])
	}
	for i, got := range rec {
		if strings.TrimSpace(got) != lichessColumns[i] {
			return fmt.Sprintf("column %d is %s, expected %q", i+1, quote(got), lichessColumns[i])
		}
	}
	return ""
}

func puzzleTask(cr *csv.Reader, rec []string, name string, line int, domain, split string) (schemas.Task, *Error) {
	colErr := func(col int, format string, args ...any) *Error {
		l, c := cr.FieldPos(col)
		e := lineErr(name, l, "column %s: %s", lichessColumns[col], fmt.Sprintf(format, args...))
		e.Col, e.Column = c, lichessColumns[col]
		return e
	}
	id := strings.TrimSpace(rec[colID])
	if id == "" {
		return schemas.Task{}, colErr(colID, "is empty")
	}
	fen := strings.Join(strings.Fields(rec[colFEN]), " ")
	if msg := checkFEN(fen); msg != "" {
		return schemas.Task{}, colErr(colFEN, "%s in %s", msg, quote(rec[colFEN]))
	}
	moves := strings.Fields(rec[colMoves])
	if len(moves) < 2 {
		return schemas.Task{}, colErr(colMoves, "expected at least 2 UCI moves (the opponent's move, then the solution), found %d", len(moves))
	}
	for i, m := range moves {
		if !isUCI(m) {
			return schemas.Task{}, colErr(colMoves, "move %d %s is not a UCI move like e2e4 or e7e8q", i+1, quote(m))
		}
	}
	meta := LichessMeta{
		FEN:         fen,
		Moves:       moves,
		Themes:      strings.Fields(rec[colThemes]),
		GameURL:     strings.TrimSpace(rec[colGameURL]),
		OpeningTags: []string{},
	}
	for _, f := range []struct {
		col int
		dst *int
	}{
		{colRating, &meta.Rating},
		{colRatingDeviation, &meta.RatingDeviation},
		{colPopularity, &meta.Popularity},
		{colNbPlays, &meta.NbPlays},
	} {
		v, err := strconv.Atoi(strings.TrimSpace(rec[f.col]))
		if err != nil {
			return schemas.Task{}, colErr(f.col, "expected an integer, found %s", quote(rec[f.col]))
		}
		*f.dst = v
	}
	if len(rec) > colOpeningTags {
		meta.OpeningTags = strings.Fields(rec[colOpeningTags])
	}
	if meta.Themes == nil {
		meta.Themes = []string{}
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return schemas.Task{}, lineErr(name, line, "encode meta: %v", err)
	}
	return schemas.Task{
		ID:       id,
		Domain:   domain,
		Split:    split,
		Question: fen,
		Answers:  []string{strings.Join(moves, " ")},
		Meta:     string(m),
	}, nil
}

func isUCI(m string) bool {
	if len(m) != 4 && len(m) != 5 {
		return false
	}
	sq := func(f, r byte) bool { return f >= 'a' && f <= 'h' && r >= '1' && r <= '8' }
	if !sq(m[0], m[1]) || !sq(m[2], m[3]) {
		return false
	}
	return len(m) == 4 || strings.IndexByte("qrbn", m[4]) >= 0
}

// checkFEN checks the shape of a FEN (six fields, eight ranks of eight
// squares, side to move); it returns "" when the shape is right. Legality
// is the chess domain's business.
func checkFEN(fen string) string {
	fields := strings.Fields(fen)
	if len(fields) != 6 {
		return fmt.Sprintf("expected a FEN of 6 space-separated fields, found %d", len(fields))
	}
	ranks := strings.Split(fields[0], "/")
	if len(ranks) != 8 {
		return fmt.Sprintf("expected 8 ranks in the FEN board, found %d", len(ranks))
	}
	for i, rank := range ranks {
		squares := 0
		for _, c := range rank {
			switch {
			case c >= '1' && c <= '8':
				squares += int(c - '0')
			case strings.ContainsRune("pnbrqkPNBRQK", c):
				squares++
			default:
				return fmt.Sprintf("unexpected %q in FEN rank %d", c, 8-i)
			}
		}
		if squares != 8 {
			return fmt.Sprintf("FEN rank %d has %d squares, expected 8", 8-i, squares)
		}
	}
	if fields[1] != "w" && fields[1] != "b" {
		return fmt.Sprintf("expected side to move w or b in the FEN, found %q", fields[1])
	}
	for i, f := range fields[4:] {
		if n, err := strconv.Atoi(f); err != nil || n < 0 {
			return fmt.Sprintf("expected a move counter in FEN field %d, found %q", i+5, f)
		}
	}
	return ""
}
