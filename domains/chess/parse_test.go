package chess

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseMove(t *testing.T) {
	const (
		twoKnights = "4k3/8/8/8/8/5N2/8/1N2K3 w - - 0 1"
		twoRooks   = "7k/8/8/8/4R3/8/8/1K2R3 w - - 0 1"
		promo      = "1n5k/2P5/8/8/8/8/8/K7 w - - 0 1"
		castles    = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
		ep         = "4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1"
	)
	cases := []struct {
		fen, text string
		want      string // UCI, or "" with err
		err       error
		reason    string // substring of the error
	}{
		// UCI.
		{startFEN, "e2e4", "e2e4", nil, ""},
		{startFEN, "g1f3", "g1f3", nil, ""},
		{startFEN, " e2e4\n", "e2e4", nil, ""},
		{startFEN, "e2e5", "", ErrIllegal, "the pawn on e2 cannot move to e5"},
		{startFEN, "e3e4", "", ErrIllegal, "there is no piece on e3"},
		{startFEN, "e7e5", "", ErrIllegal, "the pawn on e7 is black's, and it is white's move"},
		{startFEN, "e2e2", "", ErrIllegal, "a move must change squares"},
		{startFEN, "e2e4q", "", ErrIllegal, "only a pawn reaching the last rank promotes"},
		{startFEN, "E2E4", "", ErrUnparseable, "expected one move"},
		{startFEN, "e2e9", "", ErrUnparseable, ""},
		{startFEN, "i2i4", "", ErrUnparseable, ""},
		{promo, "c7c8q", "c7c8q", nil, ""},
		{promo, "c7c8Q", "c7c8q", nil, ""},
		{promo, "c7b8n", "c7b8n", nil, ""},
		{promo, "c7c8", "", ErrAmbiguous, "a promotion needs a piece: c7c8q, c7c8r, c7c8b or c7c8n"},
		{promo, "c7c8k", "", ErrUnparseable, ""},
		// Castling.
		{castles, "e1g1", "e1g1", nil, ""},
		{castles, "e1h1", "e1g1", nil, ""},
		{castles, "e1c1", "e1c1", nil, ""},
		{castles, "e1a1", "e1c1", nil, ""},
		{castles, "O-O", "e1g1", nil, ""},
		{castles, "0-0", "e1g1", nil, ""},
		{castles, "o-o", "e1g1", nil, ""},
		{castles, "O-O+", "e1g1", nil, ""},
		{castles, "O-O-O", "e1c1", nil, ""},
		{castles, "0-0-0", "e1c1", nil, ""},
		{castles, "Ke1g1", "e1g1", nil, ""},
		{castles, "Kg1", "e1g1", nil, ""}, // the king's only way to g1 is castling
		{castles, "Kc1", "e1c1", nil, ""},
		{castles, "Kb1", "", ErrIllegal, "no white king can move to b1"},
		{startFEN, "O-O", "", ErrIllegal, "white cannot castle kingside here"},
		{startFEN, "O-O-O", "", ErrIllegal, "white cannot castle queenside here"},
		{startFEN, "OO", "", ErrUnparseable, ""},
		// SAN.
		{startFEN, "e4", "e2e4", nil, ""},
		{startFEN, "Nf3", "g1f3", nil, ""},
		{startFEN, "Nf3+", "g1f3", nil, ""},
		{startFEN, "Nf3!", "g1f3", nil, ""},
		{startFEN, "Nf3?!", "g1f3", nil, ""},
		{startFEN, "Nf3#", "g1f3", nil, ""},
		{startFEN, "Pe4", "e2e4", nil, ""},
		{startFEN, "Ng1f3", "g1f3", nil, ""},
		{startFEN, "Ng1-f3", "g1f3", nil, ""},
		{startFEN, "e2-e4", "e2e4", nil, ""},
		{startFEN, "♘f3", "g1f3", nil, ""},
		{startFEN, "♞f3", "g1f3", nil, ""},
		{startFEN, "nf3", "", ErrUnparseable, ""},
		{startFEN, "Nf4", "", ErrIllegal, "no white knight can move to f4"},
		{startFEN, "Bb5", "", ErrIllegal, "no white bishop can move to b5"},
		{startFEN, "Nb1f3", "", ErrIllegal, "the knight on b1 cannot move to f3"},
		{startFEN, "Bg1f3", "", ErrIllegal, "the piece on g1 is a knight, not a bishop"},
		{startFEN, "e5", "", ErrIllegal, "no white pawn can move to e5"},
		{startFEN, "e8=Q", "", ErrIllegal, "no white pawn can move to e8"},
		{startFEN, "e4=Q", "", ErrIllegal, "only a pawn reaching the last rank promotes"},
		{startFEN, "Ne4=Q", "", ErrIllegal, "only a pawn reaching the last rank promotes"},
		{twoKnights, "Nd2", "", ErrAmbiguous, "it could be Nbd2 or Nfd2"},
		{twoKnights, "Nbd2", "b1d2", nil, ""},
		{twoKnights, "Nfd2", "f3d2", nil, ""},
		{twoKnights, "N1d2", "b1d2", nil, ""},
		{twoKnights, "N3d2", "f3d2", nil, ""},
		{twoKnights, "Nb1d2", "b1d2", nil, ""},
		{twoKnights, "Ncd2", "", ErrIllegal, "no white knight from the c-file can move to d2"},
		{twoKnights, "N2d2", "", ErrIllegal, "no white knight from rank 2 can move to d2"},
		{twoRooks, "Re2", "", ErrAmbiguous, "it could be R1e2 or R4e2"},
		{twoRooks, "R1e2", "e1e2", nil, ""},
		{twoRooks, "R4e2", "e4e2", nil, ""},
		{twoRooks, "Ree2", "", ErrAmbiguous, ""},
		{twoRooks, "Rxe2", "", ErrAmbiguous, ""},
		{twoRooks, "R1xe2", "e1e2", nil, ""},
		{promo, "c8=Q+", "c7c8q", nil, ""},
		{promo, "c8=Q", "c7c8q", nil, ""},
		{promo, "c8Q", "c7c8q", nil, ""},
		{promo, "c8=q", "c7c8q", nil, ""},
		{promo, "c8=N", "c7c8n", nil, ""},
		{promo, "cxb8=R", "c7b8r", nil, ""},
		{promo, "cxb8=N", "c7b8n", nil, ""},
		{promo, "c7-c8=Q", "c7c8q", nil, ""},
		{promo, "c8", "", ErrAmbiguous, "a promotion needs a piece"},
		{promo, "cxb8", "", ErrAmbiguous, "a promotion needs a piece"},
		{promo, "c8=K", "", ErrUnparseable, ""},
		{ep, "exd6", "e5d6", nil, ""},
		{ep, "exd6e.p.", "e5d6", nil, ""},
		{ep, "exd6 e.p.", "e5d6", nil, ""},
		{ep, "e5xd6", "e5d6", nil, ""},
		{ep, "ed6", "e5d6", nil, ""},
		{ep, "dxe6", "", ErrIllegal, "no white pawn from the d-file can move to e6"},
		// Not moves at all.
		{startFEN, "", "", ErrUnparseable, "expected one move"},
		{startFEN, "   ", "", ErrUnparseable, ""},
		{startFEN, "+", "", ErrUnparseable, ""},
		{startFEN, "hello", "", ErrUnparseable, ""},
		{startFEN, "1. e4", "", ErrUnparseable, ""},
		{startFEN, "1.e4", "", ErrUnparseable, ""},
		{startFEN, "e4 e5", "", ErrUnparseable, ""},
		{startFEN, "N", "", ErrUnparseable, ""},
		{startFEN, "Nxx3", "", ErrUnparseable, ""},
		{startFEN, "Zf3", "", ErrUnparseable, ""},
		{startFEN, "N f3", "", ErrUnparseable, ""},
		{startFEN, "Ng1ff3", "", ErrUnparseable, ""},
		{startFEN, "<move>e4</move>", "", ErrUnparseable, ""},
		{startFEN, strings.Repeat("e4", 100), "", ErrUnparseable, "too long"},
		{startFEN, "0000", "", ErrIllegal, "null move"},
		{startFEN, "--", "", ErrIllegal, "null move"},
	}
	for _, c := range cases {
		got, err := ParseMove(c.fen, c.text)
		if c.err == nil {
			if err != nil || got != c.want {
				t.Errorf("ParseMove(%s, %q) = %q, %v; want %q", c.fen, c.text, got, err, c.want)
			}
			continue
		}
		var me *MoveError
		if !errors.Is(err, c.err) || !errors.As(err, &me) {
			t.Errorf("ParseMove(%s, %q) = %q, %v; want %v", c.fen, c.text, got, err, c.err)
			continue
		}
		if got != "" || !strings.Contains(me.Reason, c.reason) || !strings.Contains(err.Error(), me.Reason) {
			t.Errorf("ParseMove(%s, %q) = %q, %v; want reason containing %q", c.fen, c.text, got, err, c.reason)
		}
		if len(me.Input) > 40 {
			t.Errorf("ParseMove(%q): Input not cut: %d bytes", c.text, len(me.Input))
		}
	}
}

func TestParseMoveErrorKinds(t *testing.T) {
	_, err := ParseMove("4k3/8/8/8/8/5N2/8/1N2K3 w - - 0 1", "Nd2")
	var me *MoveError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, ErrIllegal) || errors.Is(err, ErrUnparseable) {
		t.Errorf("ambiguous error kinds wrong: %v", err)
	}
	if !reflect.DeepEqual(me.Candidates, []string{"b1d2", "f3d2"}) {
		t.Errorf("Candidates = %v", me.Candidates)
	}
	if got, want := err.Error(), `ambiguous move "Nd2": it could be Nbd2 or Nfd2`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	_, err = ParseMove(startFEN, "e5")
	if errors.Is(err, ErrAmbiguous) || !errors.Is(err, ErrIllegal) {
		t.Errorf("illegal error kinds wrong: %v", err)
	}
	_, err = ParseMove("4k3/8/8/8/8/8/8/4R1K1 b - - 0 1", "Ke7")
	if err == nil || !strings.Contains(err.Error(), "(black is in check)") {
		t.Errorf("an illegal move in check should say so: %v", err)
	}
	_, err = ParseMove("not a fen", "e4")
	if !errors.Is(err, ErrBadFEN) {
		t.Errorf("bad FEN: err = %v", err)
	}
}
