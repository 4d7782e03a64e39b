package chess

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	chesslib "github.com/corentings/chess/v2"
)

// ErrBadFEN is wrapped by every error about a FEN that cannot be played.
var ErrBadFEN = errors.New("bad FEN")

// Move is one move in both notations.
type Move struct {
	UCI string
	SAN string
}

// Position is an immutable chess position with its legal moves. All its
// methods are read-only and safe for concurrent use.
type Position struct {
	pos      *chesslib.Position
	legal    []chesslib.Move // generation order; never modified
	fen      string
	fullmove int
	check    bool // chesslib keeps its own flag private

	uciOnce, sanOnce sync.Once
	uci, san         []string // parallel to legal
}

// fenMu serialises chesslib's FEN decoder, which splits ranks into a
// package-level array and so races when two goroutines decode at once.
var fenMu sync.Mutex

// NewPosition parses a FEN (six fields; four are accepted and completed with
// "0 1"). Castling rights that the king and rook placement cannot use and an
// en-passant square no pawn can have just crossed are dropped, so FEN() may
// differ from the input in those two fields. A position with other than one
// king a side, a pawn on the first or last rank, or the side not to move in
// check is rejected.
func NewPosition(fen string) (*Position, error) {
	p, err := newPosition(fen)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %s", ErrBadFEN, cut(fen, 100), err)
	}
	return p, nil
}

func newPosition(fen string) (*Position, error) {
	f := strings.Fields(fen)
	if len(f) == 4 {
		f = append(f, "0", "1")
	}
	if len(f) != 6 {
		return nil, fmt.Errorf("expected 6 space-separated fields, found %d", len(f))
	}
	var board [64]byte // index = file + 8*rank, as chesslib.Square; 0 = empty
	ranks := strings.Split(f[0], "/")
	if len(ranks) != 8 {
		return nil, fmt.Errorf("expected 8 ranks, found %d", len(ranks))
	}
	kings := map[byte]int{}
	for i, r := range ranks {
		rank := 7 - i
		file := 0
		for j := 0; j < len(r); j++ {
			c := r[j]
			switch {
			case c >= '1' && c <= '8':
				file += int(c - '0')
			case strings.IndexByte("pnbrqkPNBRQK", c) >= 0:
				if file < 8 {
					board[file+8*rank] = c
				}
				file++
				if c == 'k' || c == 'K' {
					kings[c]++
				}
				if (c == 'p' || c == 'P') && (rank == 0 || rank == 7) {
					return nil, fmt.Errorf("pawn on rank %d", rank+1)
				}
			default:
				return nil, fmt.Errorf("unexpected %q in rank %d", c, rank+1)
			}
		}
		if file != 8 {
			return nil, fmt.Errorf("rank %d has %d squares, expected 8", rank+1, file)
		}
	}
	if kings['K'] != 1 || kings['k'] != 1 {
		return nil, fmt.Errorf("expected one king a side, found %d white and %d black", kings['K'], kings['k'])
	}
	white := f[1] == "w"
	if !white && f[1] != "b" {
		return nil, fmt.Errorf("expected side to move w or b, found %q", f[1])
	}
	castle, err := castling(f[2], &board)
	if err != nil {
		return nil, err
	}
	ep, err := enPassant(f[3], white, &board)
	if err != nil {
		return nil, err
	}
	half, err := strconv.Atoi(f[4])
	if err != nil || half < 0 {
		return nil, fmt.Errorf("expected a halfmove clock, found %q", f[4])
	}
	full, err := strconv.Atoi(f[5])
	if err != nil || full < 0 {
		return nil, fmt.Errorf("expected a fullmove number, found %q", f[5])
	}
	full = max(full, 1) // some writers start at 0; chesslib refuses it
	canon := strings.Join([]string{f[0], f[1], castle, ep, strconv.Itoa(half), strconv.Itoa(full)}, " ")

	pos := &chesslib.Position{}
	fenMu.Lock()
	err = pos.UnmarshalText([]byte(canon))
	fenMu.Unlock()
	if err != nil {
		return nil, err
	}
	p := wrap(pos, full)
	// chesslib would let the side to move capture a king left in check.
	if b := pos.Board(); attacked(b, kingSquare(b, pos.Turn().Other()), pos.Turn()) {
		return nil, fmt.Errorf("the side not to move (%s) is in check", colorName(pos.Turn().Other()))
	}
	return p, nil
}

// castling keeps the rights whose king and rook stand on their squares.
func castling(s string, board *[64]byte) (string, error) {
	if s == "-" {
		return s, nil
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("KQkq", s[i]) < 0 || strings.IndexByte(s[i+1:], s[i]) >= 0 {
			return "", fmt.Errorf("expected castling rights like KQkq or -, found %q", s)
		}
	}
	var keep []byte
	for _, r := range []struct {
		c          byte
		king, rook int
		k, r       byte
	}{
		{'K', 4, 7, 'K', 'R'}, {'Q', 4, 0, 'K', 'R'},
		{'k', 60, 63, 'k', 'r'}, {'q', 60, 56, 'k', 'r'},
	} {
		if strings.IndexByte(s, r.c) >= 0 && board[r.king] == r.k && board[r.rook] == r.r {
			keep = append(keep, r.c)
		}
	}
	if len(keep) == 0 {
		return "-", nil
	}
	return string(keep), nil
}

// enPassant keeps the square only if an enemy pawn can just have crossed it.
func enPassant(s string, white bool, board *[64]byte) (string, error) {
	if s == "-" {
		return s, nil
	}
	if len(s) != 2 || s[0] < 'a' || s[0] > 'h' || s[1] < '1' || s[1] > '8' {
		return "", fmt.Errorf("expected an en-passant square or -, found %q", s)
	}
	sq := int(s[0]-'a') + 8*int(s[1]-'1')
	// White to move: a black pawn went from rank 7 over rank 6 to rank 5.
	rank, pawn, landed, origin := 5, byte('p'), sq-8, sq+8
	if !white {
		rank, pawn, landed, origin = 2, 'P', sq+8, sq-8
	}
	if sq/8 != rank || board[sq] != 0 || board[landed] != pawn || board[origin] != 0 {
		return "-", nil
	}
	return s, nil
}

func wrap(pos *chesslib.Position, fullmove int) *Position {
	// ValidMoves fills chesslib's per-position cache; doing it here, once,
	// is what makes later reads free of writes.
	legal := pos.ValidMoves()
	for i := range legal {
		if legal[i].Promo() == chesslib.NoPieceType {
			continue
		}
		// chesslib v2.3.2 reuses one Move while trying Q, R, B, N and does
		// not reset its tags, so an under-promotion inherits the queen's
		// Check tag (and Update then marks the next position in check).
		// Decoding the move afresh recomputes its tags.
		if m, err := (chesslib.UCINotation{}).Decode(pos, uci(&legal[i])); err == nil {
			legal[i] = *m
		}
	}
	return &Position{
		pos:      pos,
		legal:    legal,
		fen:      pos.String(),
		fullmove: fullmove,
		check:    attacked(pos.Board(), kingSquare(pos.Board(), pos.Turn()), pos.Turn().Other()),
	}
}

// after returns the position after m, which must come from p.legal.
func (p *Position) after(m *chesslib.Move) *Position {
	full := p.fullmove
	if p.pos.Turn() == chesslib.Black {
		full++
	}
	return wrap(p.pos.Update(m), full)
}

// FEN returns the position in Forsyth–Edwards Notation.
func (p *Position) FEN() string { return p.fen }

// SideToMove is "white" or "black".
func (p *Position) SideToMove() string { return colorName(p.pos.Turn()) }

// MoveNumber is the fullmove number (FEN field 6): 1 at the start, +1 after
// each black move.
func (p *Position) MoveNumber() int { return p.fullmove }

// InCheck reports whether the side to move is in check.
func (p *Position) InCheck() bool { return p.check }

// Checkmate reports whether the side to move is checkmated.
func (p *Position) Checkmate() bool { return p.check && len(p.legal) == 0 }

// Stalemate reports whether the side to move has no legal move and is not in
// check.
func (p *Position) Stalemate() bool { return !p.check && len(p.legal) == 0 }

// LegalMovesUCI lists the legal moves in UCI, grouped by piece (king, queen,
// rook, bishop, knight, pawn), then by origin square, castling last; the
// list is parallel to LegalMovesSAN.
func (p *Position) LegalMovesUCI() []string {
	p.uciOnce.Do(func() {
		p.uci = make([]string, len(p.legal))
		for i := range p.legal {
			p.uci[i] = uci(&p.legal[i])
		}
	})
	return append([]string(nil), p.uci...)
}

// LegalMovesSAN lists the legal moves in SAN, in the order of LegalMovesUCI.
func (p *Position) LegalMovesSAN() []string {
	p.sanOnce.Do(func() { p.san = p.sanList() })
	return append([]string(nil), p.san...)
}

func (p *Position) sanList() []string {
	out := make([]string, len(p.legal))
	for i := range p.legal {
		out[i] = p.encodeSAN(&p.legal[i])
	}
	return out
}

// ASCII draws the board, one rank a line, white pieces in upper case, empty
// squares as '.', with rank numbers on the left and files below. White's
// side is at the bottom unless fromSideToMove is set and black is to move.
//
//	8 r . b q k b n r
//	...
//	1 R N B Q K B N R
//	  a b c d e f g h
func (p *Position) ASCII(fromSideToMove bool) string {
	flip := fromSideToMove && p.pos.Turn() == chesslib.Black
	b := p.pos.Board()
	var sb strings.Builder
	sb.Grow(18 * 9)
	for i := 0; i < 8; i++ {
		rank := 7 - i
		if flip {
			rank = i
		}
		sb.WriteByte(byte('1' + rank))
		for j := 0; j < 8; j++ {
			file := j
			if flip {
				file = 7 - j
			}
			sb.WriteByte(' ')
			sb.WriteByte(pieceChar(b.Piece(chesslib.Square(file + 8*rank))))
		}
		sb.WriteByte('\n')
	}
	if flip {
		sb.WriteString("  h g f e d c b a")
	} else {
		sb.WriteString("  a b c d e f g h")
	}
	return sb.String()
}

// Move returns the legal move text names (see ParseMove) in both notations.
func (p *Position) Move(text string) (Move, error) {
	m, err := p.parse(text)
	if err != nil {
		return Move{}, err
	}
	return Move{UCI: uci(m), SAN: p.encodeSAN(m)}, nil
}

// encodeSAN writes m (from p.legal) in SAN with python-chess's
// disambiguation: the origin file when it tells the candidates apart, else
// the rank, else both.
func (p *Position) encodeSAN(m *chesslib.Move) string {
	var sb strings.Builder
	sb.Grow(8)
	switch {
	case m.HasTag(chesslib.KingSideCastle):
		sb.WriteString("O-O")
	case m.HasTag(chesslib.QueenSideCastle):
		sb.WriteString("O-O-O")
	default:
		b := p.pos.Board()
		pc := b.Piece(m.S1())
		capture := m.HasTag(chesslib.Capture) || m.HasTag(chesslib.EnPassant)
		if pc.Type() == chesslib.Pawn {
			if capture {
				sb.WriteByte(m.S1().File().Byte())
			}
		} else {
			sb.WriteByte(pieceLetter(pc.Type()))
			others, sameFile, sameRank := false, false, false
			for i := range p.legal {
				o := &p.legal[i]
				if o.S2() != m.S2() || o.S1() == m.S1() || b.Piece(o.S1()) != pc {
					continue
				}
				others = true
				sameFile = sameFile || o.S1().File() == m.S1().File()
				sameRank = sameRank || o.S1().Rank() == m.S1().Rank()
			}
			if others && (sameRank || !sameFile) {
				sb.WriteByte(m.S1().File().Byte())
			}
			if others && sameFile {
				sb.WriteByte(m.S1().Rank().Byte())
			}
		}
		if capture {
			sb.WriteByte('x')
		}
		sb.WriteString(m.S2().String())
		if m.Promo() != chesslib.NoPieceType {
			sb.WriteByte('=')
			sb.WriteByte(pieceLetter(m.Promo()))
		}
	}
	if m.HasTag(chesslib.Check) {
		if p.pos.Update(m).Status() == chesslib.Checkmate {
			sb.WriteByte('#')
		} else {
			sb.WriteByte('+')
		}
	}
	return sb.String()
}

func uci(m *chesslib.Move) string {
	b := make([]byte, 4, 5)
	b[0], b[1] = m.S1().File().Byte(), m.S1().Rank().Byte()
	b[2], b[3] = m.S2().File().Byte(), m.S2().Rank().Byte()
	if m.Promo() != chesslib.NoPieceType {
		b = append(b, pieceLetter(m.Promo())+('a'-'A'))
	}
	return string(b)
}

func pieceLetter(t chesslib.PieceType) byte {
	return " KQRBNP"[t]
}

func pieceChar(pc chesslib.Piece) byte {
	if pc == chesslib.NoPiece {
		return '.'
	}
	c := pieceLetter(pc.Type())
	if pc.Color() == chesslib.Black {
		c += 'a' - 'A'
	}
	return c
}

func colorName(c chesslib.Color) string {
	if c == chesslib.Black {
		return "black"
	}
	return "white"
}

// cut shortens s for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func kingSquare(b *chesslib.Board, c chesslib.Color) chesslib.Square {
	k := chesslib.NewPiece(chesslib.King, c)
	for sq := chesslib.A1; sq <= chesslib.H8; sq++ {
		if b.Piece(sq) == k {
			return sq
		}
	}
	return chesslib.NoSquare
}

// attacked reports whether a piece of colour by attacks sq.
func attacked(b *chesslib.Board, sq chesslib.Square, by chesslib.Color) bool {
	if sq == chesslib.NoSquare {
		return false
	}
	f, r := int(sq.File()), int(sq.Rank())
	at := func(df, dr int) chesslib.Piece {
		ff, rr := f+df, r+dr
		if ff < 0 || ff > 7 || rr < 0 || rr > 7 {
			return chesslib.NoPiece
		}
		return b.Piece(chesslib.Square(ff + 8*rr))
	}
	is := func(pc chesslib.Piece, types ...chesslib.PieceType) bool {
		if pc == chesslib.NoPiece || pc.Color() != by {
			return false
		}
		for _, t := range types {
			if pc.Type() == t {
				return true
			}
		}
		return false
	}
	for _, d := range [8][2]int{{1, 2}, {2, 1}, {2, -1}, {1, -2}, {-1, -2}, {-2, -1}, {-2, 1}, {-1, 2}} {
		if is(at(d[0], d[1]), chesslib.Knight) {
			return true
		}
	}
	for _, d := range [8][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}, {1, 1}, {1, -1}, {-1, 1}, {-1, -1}} {
		if is(at(d[0], d[1]), chesslib.King) {
			return true
		}
		slider := chesslib.Rook
		if d[0] != 0 && d[1] != 0 {
			slider = chesslib.Bishop
		}
		for n := 1; n < 8; n++ {
			pc := at(n*d[0], n*d[1])
			if pc == chesslib.NoPiece {
				if f+n*d[0] < 0 || f+n*d[0] > 7 || r+n*d[1] < 0 || r+n*d[1] > 7 {
					break
				}
				continue
			}
			if is(pc, slider, chesslib.Queen) {
				return true
			}
			break
		}
	}
	// A white pawn attacks upwards, so it stands one rank below its target.
	dr := -1
	if by == chesslib.Black {
		dr = 1
	}
	return is(at(-1, dr), chesslib.Pawn) || is(at(1, dr), chesslib.Pawn)
}
