package chess

import (
	"errors"
	"strings"
	"testing"
)

func FuzzParseMove(f *testing.F) {
	for _, s := range []struct{ fen, text string }{
		{startFEN, "e4"}, {startFEN, "Nf3+"}, {startFEN, "e2e4"}, {startFEN, "O-O"},
		{kiwipete, "O-O-O"}, {kiwipete, "e1a1"}, {kiwipete, "Qxf6"}, {kiwipete, "dxe6"},
		{perftPos4, "bxa8=Q"}, {perftPos4, "b7a8n"}, {promoPerft, "bxa1=N+"}, {promoPerft, "g1"},
		{"4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1", "exd6 e.p."},
		{"4k3/8/8/8/8/5N2/8/1N2K3 w - - 0 1", "Nd2"},
		{"4k3/8/8/8/8/8/8/4K3 w - - 0 1", "♔e2"},
		{startFEN, "hello"}, {startFEN, ""}, {startFEN, "0000"}, {"bad fen", "e4"},
		{"8/8/8/8/8/8/8/8 w - - 0 1", "e4"}, {"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e3 0 1", "d4"},
	} {
		f.Add(s.fen, s.text)
	}
	f.Fuzz(func(t *testing.T, fen, text string) {
		got, err := ParseMove(fen, text)
		if errors.Is(err, ErrBadFEN) {
			return
		}
		p, perr := NewPosition(fen)
		if perr != nil {
			t.Fatalf("ParseMove accepted a FEN NewPosition refuses: %v", perr)
		}
		if err != nil {
			var me *MoveError
			if !errors.As(err, &me) || got != "" {
				t.Fatalf("ParseMove(%q, %q) = %q, %v: want a *MoveError and no move", fen, text, got, err)
			}
			if me.Kind != ErrUnparseable && me.Kind != ErrIllegal && me.Kind != ErrAmbiguous || me.Reason == "" {
				t.Fatalf("bad MoveError %#v", me)
			}
			if me.Kind == ErrAmbiguous && len(me.Candidates) < 2 {
				t.Fatalf("ambiguous with candidates %v", me.Candidates)
			}
			return
		}
		legal := p.LegalMovesUCI()
		i := index(legal, got)
		if i < 0 {
			t.Fatalf("ParseMove(%q, %q) = %q, not among the legal moves %v", fen, text, got, legal)
		}
		// The move's own notations name it too.
		for _, again := range []string{got, p.LegalMovesSAN()[i]} {
			if u, err := ParseMove(fen, again); err != nil || u != got {
				t.Fatalf("ParseMove(%q, %q) = %q, %v; want %q", fen, again, u, err, got)
			}
		}
	})
}

func FuzzNewPosition(f *testing.F) {
	for _, fen := range []string{startFEN, kiwipete, perftPos3, perftPos4, perftPos5, promoPerft,
		"4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1", "4k3/8/8/8/8/8/8/4K2R w KQkq - 0 1", "8/8/8/8/8/8/8/8 w - - 0 1",
		"4k3/8/8/8/8/8/8/4K3 w - - 0 0", "4k3/8/8/8/8/8/8/4K3 w -", "k7/8/8/8/8/8/8/7K b - - 99 200"} {
		f.Add(fen)
	}
	f.Fuzz(func(t *testing.T, fen string) {
		p, err := NewPosition(fen)
		if err != nil {
			if !errors.Is(err, ErrBadFEN) {
				t.Fatalf("error %v does not wrap ErrBadFEN", err)
			}
			return
		}
		q, err := NewPosition(p.FEN())
		if err != nil || q.FEN() != p.FEN() {
			t.Fatalf("FEN %q does not round-trip: %v", p.FEN(), err)
		}
		ucis, sans := p.LegalMovesUCI(), p.LegalMovesSAN()
		if len(ucis) != len(sans) {
			t.Fatalf("%d UCI moves, %d SAN", len(ucis), len(sans))
		}
		if (len(ucis) == 0) != (p.Checkmate() || p.Stalemate()) {
			t.Fatalf("%d moves, mate %v, stalemate %v", len(ucis), p.Checkmate(), p.Stalemate())
		}
		_ = p.ASCII(true)
	})
}

// fuzzPuzzles are the puzzles FuzzPlay plays: FEN and line.
var fuzzPuzzles = [][2]string{
	{"q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17", "e8d7 a2e6 d7d8 f7f8"},
	{"r3r1k1/p4ppp/2p2n2/1p6/3P1qb1/2NQR3/PPB2PP1/R1B3K1 w - - 5 18", "e3g3 e8e1 g1h2 e1c1 a1c1 f4h6 h2g1 h6c1"},
	{"7k/5ppp/8/8/8/8/5PPP/RR4K1 b - - 0 1", "h8g8 a1a8"},
	{"r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1", "a8b8 e1g1"},
	{"8/2q1P3/6k1/8/8/8/8/K7 b - - 0 1", "g6f6 e7e8n"},
	{"4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1", "d7d5 e5d6"},
}

// FuzzPlay plays a ';'-separated script of texts on one of fuzzPuzzles and
// checks the state machine after every call.
func FuzzPlay(f *testing.F) {
	f.Add(uint8(0), "Be6+;Qf8#")
	f.Add(uint8(0), "hello;Be5;Be6;Qxg7;Qf8")
	f.Add(uint8(1), "Re1+;Rxc1;Qh6;Qxc1")
	f.Add(uint8(1), "e8e1;e1c1;f4h6;h6c1;a1a1")
	f.Add(uint8(2), "Rb8#")
	f.Add(uint8(2), "Ra7;Ra8")
	f.Add(uint8(3), "O-O-O;e1h1")
	f.Add(uint8(4), "e8;e8=Q;e8=N+")
	f.Add(uint8(5), "exd6 e.p.")
	f.Add(uint8(5), ";;;0000;--;e6")
	f.Fuzz(func(t *testing.T, which uint8, script string) {
		pz := fuzzPuzzles[int(which)%len(fuzzPuzzles)]
		line := strings.Fields(pz[1])
		z, err := NewPuzzle(pz[0], line)
		if err != nil {
			t.Fatal(err)
		}
		solver := z.SolverSide()
		for _, text := range strings.Split(script, ";") {
			before, wasDone, counts := z.FEN(), z.Done(), z.Counts()
			legal := z.LegalMovesUCI()
			doneBefore, total := z.Progress()
			out, err := z.Play(text)
			after := z.Counts()
			switch {
			case wasDone:
				if !errors.Is(err, ErrFinished) || z.FEN() != before || after != counts {
					t.Fatalf("Play(%q) after the end: %v", text, err)
				}
			case err != nil:
				var me *MoveError
				if !errors.As(err, &me) || z.FEN() != before || z.Done() {
					t.Fatalf("Play(%q): refused with %v but the puzzle changed", text, err)
				}
				if after.Legal != counts.Legal || after.Unparseable+after.Illegal+after.Ambiguous != counts.Unparseable+counts.Illegal+counts.Ambiguous+1 {
					t.Fatalf("Play(%q): counts %+v -> %+v", text, counts, after)
				}
			default:
				if after.Legal != counts.Legal+1 || index(legal, out.Played) < 0 || out.Correct == out.Failed {
					t.Fatalf("Play(%q): outcome %+v, counts %+v -> %+v", text, out, counts, after)
				}
				if out.Step != doneBefore || out.Expected != line[2*doneBefore+1] {
					t.Fatalf("Play(%q): step %d expected %s, want %d %s", text, out.Step, out.Expected, doneBefore, line[2*doneBefore+1])
				}
				if out.Correct && out.Played != out.Expected && !out.Mate {
					t.Fatalf("Play(%q): a non-mating move other than %s was accepted", text, out.Expected)
				}
				if out.Failed && (z.FEN() != before || !z.Failed()) {
					t.Fatalf("Play(%q): failed but the position moved or status is %s", text, z.Status())
				}
				if out.Correct && !out.Solved && (out.OpponentReply != line[2*doneBefore+2] || z.SideToMove() != solver) {
					t.Fatalf("Play(%q): reply %q, side %s", text, out.OpponentReply, z.SideToMove())
				}
				if out.Solved != z.Solved() || (out.Solved && !out.Mate && doneBefore != total-1) {
					t.Fatalf("Play(%q): solved %v (puzzle %v) at step %d of %d", text, out.Solved, z.Solved(), doneBefore, total)
				}
			}
			if r := z.Reward(); (r == 1) != z.Solved() || (r != 0 && r != 1) {
				t.Fatalf("reward %v with status %s", r, z.Status())
			}
		}
	})
}

func index(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}
