package chess

import (
	"errors"
	"fmt"
	"strings"

	chesslib "github.com/corentings/chess/v2"
)

// The three ways a solver's move text can be refused. MoveError carries
// the details; errors.Is(err, ErrIllegal) is also true for ErrAmbiguous.
var (
	ErrUnparseable = errors.New("not a move")
	ErrIllegal     = errors.New("illegal move")
	ErrAmbiguous   = errors.New("ambiguous move")
)

// maxMoveText bounds the text the parser looks at; no move is longer
// ("Qa1xb2=Q+!?" and the like are about a dozen bytes).
const maxMoveText = 24

// MoveError says why a move text was refused, in words a model can act on.
type MoveError struct {
	Kind   error  // ErrUnparseable, ErrIllegal or ErrAmbiguous
	Input  string // the text as given, cut to a few dozen bytes
	Reason string
	// Candidates are the legal moves (UCI) an ambiguous text could mean.
	Candidates []string
}

func (e *MoveError) Error() string {
	return fmt.Sprintf("%v %q: %s", e.Kind, e.Input, e.Reason)
}

// Unwrap lets errors.Is see the kind, and ErrIllegal behind ErrAmbiguous so
// that a harness counting illegal moves needs one check.
func (e *MoveError) Unwrap() []error {
	if e.Kind == ErrAmbiguous {
		return []error{ErrAmbiguous, ErrIllegal}
	}
	return []error{e.Kind}
}

// ParseMove returns the UCI of the legal move that text names in the
// position fen. Text is one move in UCI (e2e4, e7e8q; castling as the king's
// move e1g1 or onto its rook e1h1) or SAN (Nf3, exd5, Nbd2, R1e2, e8=Q,
// e8Q, O-O, 0-0-0), optionally followed by check marks or annotations
// (+ # ! ? e.p.), which are not checked; a capture 'x' (or '-' between
// squares) is optional and not checked either. Piece letters are upper
// case; promotion letters may be either; figurines (♘f3) are read as
// letters. A king move onto its castling square (Kg1) is read as castling,
// the king's only way there. Move numbers ("1. e4") and other words are
// not accepted: extracting the move is the harness's job. Errors are
// *MoveError of kind ErrUnparseable, ErrIllegal or ErrAmbiguous, or wrap
// ErrBadFEN.
func ParseMove(fen, text string) (string, error) {
	p, err := NewPosition(fen)
	if err != nil {
		return "", err
	}
	m, merr := p.parse(text)
	if merr != nil {
		return "", merr
	}
	return uci(m), nil
}

// notation is a move text taken apart; zero fields were not given.
type notation struct {
	castle   chesslib.MoveTag // KingSideCastle or QueenSideCastle
	piece    chesslib.PieceType
	fromFile int // 1..8, 0 = not given
	fromRank int // 1..8
	to       chesslib.Square
	promo    chesslib.PieceType
	null     bool
}

// figurines maps Unicode chess symbols to the ASCII the grammar reads.
var figurines = strings.NewReplacer(
	"♔", "K", "♕", "Q", "♖", "R", "♗", "B", "♘", "N", "♙", "",
	"♚", "K", "♛", "Q", "♜", "R", "♝", "B", "♞", "N", "♟", "",
	"×", "x", "–", "-", "‐", "-", "−", "-",
)

func unparseable(input, reason string) *MoveError {
	return &MoveError{Kind: ErrUnparseable, Input: input, Reason: reason}
}

const grammarHint = "expected one move in UCI (e2e4, e7e8q) or SAN (Nf3, exd5, O-O, e8=Q)"

// lex takes a move text apart without looking at the board.
func lex(text string) (notation, string, *MoveError) {
	input := cut(text, maxMoveText+8)
	s := strings.TrimSpace(text)
	if len(s) > maxMoveText*3 { // a figurine is 3 bytes
		return notation{}, input, unparseable(input, "too long for one move; "+grammarHint)
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			s = figurines.Replace(s)
			break
		}
	}
	if len(s) > maxMoveText {
		return notation{}, input, unparseable(input, "too long for one move; "+grammarHint)
	}
	// Annotations and check marks are decoration: strip them from the end.
	for {
		t := strings.TrimSpace(strings.TrimSuffix(s, "e.p."))
		t = strings.TrimRight(t, "+#!?")
		if t == s {
			break
		}
		s = t
	}
	if s == "" {
		return notation{}, input, unparseable(input, grammarHint)
	}
	switch s {
	case "O-O", "0-0", "o-o":
		return notation{castle: chesslib.KingSideCastle}, input, nil
	case "O-O-O", "0-0-0", "o-o-o":
		return notation{castle: chesslib.QueenSideCastle}, input, nil
	case "0000", "--", "Z0", "null":
		return notation{null: true}, input, nil
	}
	var n notation
	if strings.IndexByte("KQRBNP", s[0]) >= 0 {
		n.piece = pieceType(s[0])
		s = s[1:]
	}
	// Promotion: a piece letter after the destination rank, maybe after '='.
	if l := len(s); l >= 3 && strings.IndexByte("QRBNqrbn", s[l-1]) >= 0 {
		body := strings.TrimSuffix(s[:l-1], "=")
		if c := body[len(body)-1]; c >= '1' && c <= '8' {
			n.promo = pieceType(s[l-1] &^ ('a' - 'A'))
			s = body
		}
	}
	if len(s) < 2 || !isFile(s[len(s)-2]) || !isRank(s[len(s)-1]) {
		return notation{}, input, unparseable(input, grammarHint)
	}
	n.to = chesslib.Square(int(s[len(s)-2]-'a') + 8*int(s[len(s)-1]-'1'))
	from := s[:len(s)-2]
	if l := len(from); l > 0 && strings.IndexByte("x-:", from[l-1]) >= 0 {
		from = from[:l-1]
	}
	switch {
	case from == "":
	case len(from) == 1 && isFile(from[0]):
		n.fromFile = int(from[0]-'a') + 1
	case len(from) == 1 && isRank(from[0]):
		n.fromRank = int(from[0]-'1') + 1
	case len(from) == 2 && isFile(from[0]) && isRank(from[1]):
		n.fromFile, n.fromRank = int(from[0]-'a')+1, int(from[1]-'1')+1
	default:
		return notation{}, input, unparseable(input, grammarHint)
	}
	return n, input, nil
}

func isFile(c byte) bool { return c >= 'a' && c <= 'h' }
func isRank(c byte) bool { return c >= '1' && c <= '8' }

func pieceType(c byte) chesslib.PieceType {
	switch c {
	case 'K':
		return chesslib.King
	case 'Q':
		return chesslib.Queen
	case 'R':
		return chesslib.Rook
	case 'B':
		return chesslib.Bishop
	case 'N':
		return chesslib.Knight
	case 'P':
		return chesslib.Pawn
	}
	return chesslib.NoPieceType
}

var pieceNames = [...]string{"", "king", "queen", "rook", "bishop", "knight", "pawn"}

// parse resolves text to one of p.legal.
func (p *Position) parse(text string) (*chesslib.Move, *MoveError) {
	n, input, err := lex(text)
	if err != nil {
		return nil, err
	}
	illegal := func(format string, args ...any) *MoveError {
		reason := fmt.Sprintf(format, args...)
		if p.check {
			reason += fmt.Sprintf(" (%s is in check)", p.SideToMove())
		}
		return &MoveError{Kind: ErrIllegal, Input: input, Reason: reason}
	}
	side := p.SideToMove()
	if n.null {
		return nil, illegal("a null move (pass) is not allowed")
	}
	if n.castle != 0 {
		for i := range p.legal {
			if p.legal[i].HasTag(n.castle) {
				return &p.legal[i], nil
			}
		}
		wing := "kingside"
		if n.castle == chesslib.QueenSideCastle {
			wing = "queenside"
		}
		return nil, illegal("%s cannot castle %s here", side, wing)
	}

	b := p.pos.Board()
	// From and to squares with no piece letter is coordinate notation (UCI,
	// long algebraic): any piece may move. Otherwise no letter means a pawn.
	coord := n.fromFile > 0 && n.fromRank > 0
	piece := n.piece
	if piece == chesslib.NoPieceType && !coord {
		piece = chesslib.Pawn
	}
	to := n.to
	var from chesslib.Square = chesslib.NoSquare
	if coord {
		from = chesslib.Square(n.fromFile - 1 + 8*(n.fromRank-1))
		// The king onto its own rook is how Chess960-style UCI writes castling.
		own, onto := b.Piece(from), b.Piece(to)
		if own.Type() == chesslib.King && (from == chesslib.E1 || from == chesslib.E8) &&
			onto.Type() == chesslib.Rook && onto.Color() == own.Color() && to.Rank() == from.Rank() {
			switch to.File() {
			case chesslib.FileH:
				to = from + 2
			case chesslib.FileA:
				to = from - 2
			}
		}
	}

	var cands []*chesslib.Move
	for i := range p.legal {
		m := &p.legal[i]
		if m.S2() != to {
			continue
		}
		if n.fromFile > 0 && int(m.S1().File()) != n.fromFile-1 {
			continue
		}
		if n.fromRank > 0 && int(m.S1().Rank()) != n.fromRank-1 {
			continue
		}
		if piece != chesslib.NoPieceType && b.Piece(m.S1()).Type() != piece {
			continue
		}
		if n.promo != chesslib.NoPieceType && m.Promo() != n.promo {
			continue
		}
		cands = append(cands, m)
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		return nil, p.whyIllegal(n, piece, from, to, illegal)
	}
	e := &MoveError{Kind: ErrAmbiguous, Input: input}
	promoOnly := true
	for _, m := range cands {
		e.Candidates = append(e.Candidates, uci(m))
		promoOnly = promoOnly && m.S1() == cands[0].S1()
	}
	if promoOnly {
		e.Reason = "a promotion needs a piece: " + orList(e.Candidates)
		return nil, e
	}
	sans := make([]string, len(cands))
	for i, m := range cands {
		sans[i] = p.encodeSAN(m)
	}
	e.Reason = "it could be " + orList(sans)
	return nil, e
}

// whyIllegal explains a move that matched no legal move.
func (p *Position) whyIllegal(n notation, piece chesslib.PieceType, from, to chesslib.Square, illegal func(string, ...any) *MoveError) *MoveError {
	b := p.pos.Board()
	side := p.SideToMove()
	lastRank := (p.pos.Turn() == chesslib.White && to.Rank() == chesslib.Rank8) ||
		(p.pos.Turn() == chesslib.Black && to.Rank() == chesslib.Rank1)
	if from != chesslib.NoSquare {
		pc := b.Piece(from)
		switch {
		case pc == chesslib.NoPiece:
			return illegal("there is no piece on %s", from)
		case pc.Color() != p.pos.Turn():
			return illegal("the %s on %s is %s's, and it is %s's move", pieceNames[pc.Type()], from, colorName(pc.Color()), side)
		case piece != chesslib.NoPieceType && pc.Type() != piece:
			return illegal("the piece on %s is a %s, not a %s", from, pieceNames[pc.Type()], pieceNames[piece])
		case n.promo != chesslib.NoPieceType && (pc.Type() != chesslib.Pawn || !lastRank):
			return illegal("only a pawn reaching the last rank promotes")
		case from == to:
			return illegal("a move must change squares")
		}
		return illegal("the %s on %s cannot move to %s", pieceNames[pc.Type()], from, to)
	}
	if n.promo != chesslib.NoPieceType && (piece != chesslib.Pawn || !lastRank) {
		return illegal("only a pawn reaching the last rank promotes")
	}
	where := ""
	switch {
	case n.fromFile > 0:
		where = fmt.Sprintf(" from the %c-file", 'a'+n.fromFile-1)
	case n.fromRank > 0:
		where = fmt.Sprintf(" from rank %d", n.fromRank)
	}
	return illegal("no %s %s%s can move to %s", side, pieceNames[piece], where, to)
}

func orList(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}
