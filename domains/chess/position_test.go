package chess

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
)

const (
	startFEN  = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
	kiwipete  = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
	perftPos3 = "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1"
	perftPos4 = "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1"
	perftPos5 = "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8"
	// promoPerft is promotion-heavy (under-promotions with and without check).
	promoPerft = "n1n5/PPPk4/8/8/8/8/4Kppp/5N1N b - - 0 1"
)

// perft counts leaf nodes depth plies below p, going through Position.after
// as Play does.
func perft(p *Position, depth int) int {
	if depth == 1 {
		return len(p.legal)
	}
	n := 0
	for i := range p.legal {
		n += perft(p.after(&p.legal[i]), depth-1)
	}
	return n
}

// TestPerft checks move generation, including castling, en passant and
// promotions, against the published perft counts (chessprogramming.org).
func TestPerft(t *testing.T) {
	cases := []struct {
		name string
		fen  string
		want []int // depth 1, 2, 3
	}{
		{"start", startFEN, []int{20, 400, 8902}},
		{"kiwipete", kiwipete, []int{48, 2039, 97862}},
		{"position 3", perftPos3, []int{14, 191, 2812}},
		{"position 4", perftPos4, []int{6, 264, 9467}},
		{"position 5", perftPos5, []int{44, 1486, 62379}},
		{"promotions", promoPerft, []int{24, 496, 9483}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPosition(c.fen)
			if err != nil {
				t.Fatal(err)
			}
			for d, want := range c.want {
				if testing.Short() && d == 2 {
					break
				}
				if got := perft(p, d+1); got != want {
					t.Errorf("perft(%d) = %d, want %d", d+1, got, want)
				}
			}
			if got := len(p.LegalMovesUCI()); got != c.want[0] {
				t.Errorf("LegalMovesUCI has %d moves, want %d", got, c.want[0])
			}
		})
	}
}

// TestNotationRoundTrip: in every position up to two plies deep from the perft
// positions, each legal move's SAN and UCI parse back to that move, the
// SANs are distinct, and check marks agree with InCheck/Checkmate.
func TestNotationRoundTrip(t *testing.T) {
	const depth, want = 2, 5000
	moves := 0
	var walk func(p *Position, depth int)
	walk = func(p *Position, depth int) {
		ucis, sans := p.LegalMovesUCI(), p.LegalMovesSAN()
		if len(ucis) != len(sans) {
			t.Fatalf("%s: %d UCI moves, %d SAN", p.FEN(), len(ucis), len(sans))
		}
		seen := map[string]bool{}
		for i := range ucis {
			moves++
			if seen[sans[i]] {
				t.Fatalf("%s: SAN %s twice", p.FEN(), sans[i])
			}
			seen[sans[i]] = true
			for _, text := range []string{ucis[i], sans[i]} {
				m, err := p.parse(text)
				if err != nil {
					t.Fatalf("%s: parse %q: %v", p.FEN(), text, err)
				}
				if uci(m) != ucis[i] {
					t.Fatalf("%s: parse %q = %s, want %s", p.FEN(), text, uci(m), ucis[i])
				}
			}
			next := p.after(&p.legal[i])
			mark := ""
			if next.Checkmate() {
				mark = "#"
			} else if next.InCheck() {
				mark = "+"
			}
			if got := strings.TrimLeft(sans[i], "KQRBNOabcdefgh12345678x=-"); got != mark {
				t.Fatalf("%s: SAN %s ends %q, position after says %q", p.FEN(), sans[i], got, mark)
			}
			if depth > 1 {
				walk(next, depth-1)
			}
		}
	}
	for _, fen := range []string{startFEN, kiwipete, perftPos3, perftPos4, perftPos5, promoPerft} {
		p, err := NewPosition(fen)
		if err != nil {
			t.Fatal(err)
		}
		walk(p, depth)
	}
	if moves < want {
		t.Errorf("checked %d moves, expected over %d", moves, want)
	}
}

func TestLegalMovesSAN(t *testing.T) {
	cases := []struct {
		name string
		fen  string
		want []string // all legal moves, any order
	}{
		{"start", startFEN, strings.Fields("Na3 Nc3 Nf3 Nh3 a3 a4 b3 b4 c3 c4 d3 d4 e3 e4 f3 f4 g3 g4 h3 h4")},
		{"file disambiguation", "4k3/8/8/8/8/8/8/1N2KN2 w - - 0 1",
			strings.Fields("Kd1 Kd2 Ke2 Kf2 Na3 Nbd2 Nc3 Ne3 Nfd2 Ng3 Nh2")},
		{"promotions with check", "7k/4P3/8/8/8/8/8/K7 w - - 0 1",
			strings.Fields("Ka2 Kb1 Kb2 e8=Q+ e8=R+ e8=B e8=N")},
		{"castling with check", "5k2/8/8/8/8/8/8/4K2R w K - 0 1",
			strings.Fields("Kd1 Kd2 Ke2 Kf1 Kf2 O-O+ Rf1+ Rg1 Rh2 Rh3 Rh4 Rh5 Rh6 Rh7 Rh8+")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPosition(c.fen)
			if err != nil {
				t.Fatal(err)
			}
			got := p.LegalMovesSAN()
			sort.Strings(got)
			want := append([]string(nil), c.want...)
			sort.Strings(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("LegalMovesSAN =\n%v\nwant\n%v", got, want)
			}
		})
	}
}

func TestSANDisambiguation(t *testing.T) {
	cases := []struct {
		fen, uci, san string
	}{
		{"4k3/8/8/8/8/5N2/8/1N2K3 w - - 0 1", "b1d2", "Nbd2"},
		{"4k3/8/8/8/8/5N2/8/1N2K3 w - - 0 1", "f3d2", "Nfd2"},
		{"7k/8/8/8/4R3/8/8/1K2R3 w - - 0 1", "e1e2", "R1e2"},
		{"7k/8/8/8/4R3/8/8/1K2R3 w - - 0 1", "e4e2", "R4e2"},
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "a1b2", "Qa1b2"}, // three queens: file and rank
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "a3b2", "Q3b2"},
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "c1b2", "Qcb2"},
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "a1b1", "Qab1+"},
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "a3a2", "Q3a2"},
		{"8/7k/8/8/8/Q7/8/Q1Q1K3 w - - 0 1", "c1d2", "Qd2"},
		{"4k3/8/8/3p1p2/4P3/8/8/4K3 w - - 0 1", "e4d5", "exd5"},
		{"4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1", "e5d6", "exd6"},
		{"4k2r/8/8/8/8/8/8/4K3 b k - 0 1", "e8g8", "O-O"},
		{"r3k3/8/8/8/8/8/8/3K4 b q - 0 1", "e8c8", "O-O-O+"},
		{"4k3/8/8/8/8/8/1p6/R3K3 b - - 0 1", "b2a1n", "bxa1=N"},
		{"6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1", "a1a8", "Ra8#"},
	}
	for _, c := range cases {
		p, err := NewPosition(c.fen)
		if err != nil {
			t.Fatal(err)
		}
		m, err := p.Move(c.uci)
		if err != nil {
			t.Fatalf("%s %s: %v", c.fen, c.uci, err)
		}
		if m.SAN != c.san || m.UCI != c.uci {
			t.Errorf("%s %s: got %+v, want SAN %s", c.fen, c.uci, m, c.san)
		}
	}
}

func TestNewPosition(t *testing.T) {
	cases := []struct {
		name    string
		fen     string
		wantFEN string // "" = same as fen
		wantErr string
	}{
		{"start", startFEN, "", ""},
		{"four fields", "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -", startFEN, ""},
		{"extra spaces", "  rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR   w KQkq - 0 1 ", startFEN, ""},
		{"fullmove 0", "4k3/8/8/8/8/8/8/4K3 w - - 0 0", "4k3/8/8/8/8/8/8/4K3 w - - 0 1", ""},
		{"unusable castling dropped", "4k3/8/8/8/8/8/8/4K2R w KQkq - 0 1", "4k3/8/8/8/8/8/8/4K2R w K - 0 1", ""},
		{"castling order normalised", "r3k2r/8/8/8/8/8/8/R3K2R w qkQK - 0 1", "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", ""},
		{"en passant kept", "4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1", "", ""},
		{"en passant without pawn dropped", "4k3/8/8/4P3/8/8/8/4K3 w - d6 0 1", "4k3/8/8/4P3/8/8/8/4K3 w - - 0 1", ""},
		{"en passant on wrong rank dropped", "4k3/8/8/8/3pP3/8/8/4K3 w - d3 0 1", "4k3/8/8/8/3pP3/8/8/4K3 w - - 0 1", ""},
		{"five fields", "4k3/8/8/8/8/8/8/4K3 w - - 0", "", "expected 6 space-separated fields, found 5"},
		{"seven ranks", "4k3/8/8/8/8/8/4K3 w - - 0 1", "", "expected 8 ranks"},
		{"short rank", "4k3/8/8/8/8/8/7/4K3 w - - 0 1", "", "rank 2 has 7 squares"},
		{"long rank", "4k3/8/8/8/8/8/45/4K3 w - - 0 1", "", "rank 2 has 9 squares"},
		{"bad piece", "4k3/8/8/8/8/8/8/4X3 w - - 0 1", "", `unexpected 'X'`},
		{"no kings", "8/8/8/8/8/8/8/8 w - - 0 1", "", "expected one king a side, found 0 white and 0 black"},
		{"two white kings", "4k3/8/8/8/8/8/8/3KK3 w - - 0 1", "", "found 2 white"},
		{"pawn on rank 8", "4k2P/8/8/8/8/8/8/4K3 w - - 0 1", "", "pawn on rank 8"},
		{"pawn on rank 1", "4k3/8/8/8/8/8/8/p3K3 w - - 0 1", "", "pawn on rank 1"},
		{"side not to move in check", "4k3/8/8/8/8/8/8/4R1K1 w - - 0 1", "", "the side not to move (black) is in check"},
		{"bad turn", "4k3/8/8/8/8/8/8/4K3 x - - 0 1", "", "side to move"},
		{"bad castling", "4k3/8/8/8/8/8/8/4K3 w KK - 0 1", "", "castling rights"},
		{"bad en passant", "4k3/8/8/8/8/8/8/4K3 w - z9 0 1", "", "en-passant square"},
		{"bad clock", "4k3/8/8/8/8/8/8/4K3 w - - x 1", "", "halfmove clock"},
		{"bad fullmove", "4k3/8/8/8/8/8/8/4K3 w - - 0 -1", "", "fullmove number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPosition(c.fen)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrBadFEN) {
					t.Fatalf("err = %v, want ErrBadFEN containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := c.wantFEN
			if want == "" {
				want = c.fen
			}
			if p.FEN() != want {
				t.Errorf("FEN = %q, want %q", p.FEN(), want)
			}
		})
	}
}

func TestPositionState(t *testing.T) {
	cases := []struct {
		name                   string
		fen                    string
		side                   string
		move                   int
		check, mate, stalemate bool
		moves                  int
	}{
		{"start", startFEN, "white", 1, false, false, false, 20},
		{"black to move", "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1", "black", 1, false, false, false, 20},
		{"check", "4k3/8/8/8/8/8/8/4R1K1 b - - 0 7", "black", 7, true, false, false, 4},
		{"knight check", "4k3/8/3N4/8/8/8/8/6K1 b - - 0 1", "black", 1, true, false, false, 4},
		{"pawn check", "4k3/3P4/8/8/8/8/8/6K1 b - - 0 1", "black", 1, true, false, false, 5},
		{"checkmate", "R5k1/5ppp/8/8/8/8/8/6K1 b - - 0 1", "black", 1, true, true, false, 0},
		{"stalemate", "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", "black", 1, false, false, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPosition(c.fen)
			if err != nil {
				t.Fatal(err)
			}
			if p.SideToMove() != c.side || p.MoveNumber() != c.move || p.InCheck() != c.check ||
				p.Checkmate() != c.mate || p.Stalemate() != c.stalemate || len(p.LegalMovesUCI()) != c.moves {
				t.Errorf("side %s move %d check %v mate %v stalemate %v moves %d",
					p.SideToMove(), p.MoveNumber(), p.InCheck(), p.Checkmate(), p.Stalemate(), len(p.LegalMovesUCI()))
			}
		})
	}
}

func TestASCII(t *testing.T) {
	p, err := NewPosition("rnbqkbnr/pp1ppppp/8/2p5/4P3/8/PPPP1PPP/RNBQKBNR w KQkq c6 0 2")
	if err != nil {
		t.Fatal(err)
	}
	white := `8 r n b q k b n r
7 p p . p p p p p
6 . . . . . . . .
5 . . p . . . . .
4 . . . . P . . .
3 . . . . . . . .
2 P P P P . P P P
1 R N B Q K B N R
  a b c d e f g h`
	if got := p.ASCII(false); got != white {
		t.Errorf("ASCII(false):\n%s\nwant\n%s", got, white)
	}
	if got := p.ASCII(true); got != white {
		t.Errorf("ASCII(true) with white to move:\n%s", got)
	}
	b, err := NewPosition("rnbqkbnr/pp1ppppp/8/2p5/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2")
	if err != nil {
		t.Fatal(err)
	}
	black := `1 R . B K Q B N R
2 P P P . P P P P
3 . . N . . . . .
4 . . . P . . . .
5 . . . . . p . .
6 . . . . . . . .
7 p p p p p . p p
8 r n b k q b n r
  h g f e d c b a`
	if got := b.ASCII(true); got != black {
		t.Errorf("ASCII(true) with black to move:\n%s\nwant\n%s", got, black)
	}
	if got := b.ASCII(false); !strings.HasPrefix(got, "8 r n b q k b n r\n") {
		t.Errorf("ASCII(false) with black to move:\n%s", got)
	}
}

// TestConcurrentUse runs FEN decoding and every read-only method from many
// goroutines (meaningful under -race: chesslib's decoder shares a buffer).
func TestConcurrentUse(t *testing.T) {
	fens := []string{startFEN, kiwipete, perftPos3, perftPos4, perftPos5}
	shared, err := NewPosition(kiwipete)
	if err != nil {
		t.Fatal(err)
	}
	wantSAN := fmt.Sprint(shared.sanList())
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				fen := fens[(g+i)%len(fens)]
				p, err := NewPosition(fen)
				if err != nil {
					errs <- err
					return
				}
				if p.FEN() != fen {
					errs <- fmt.Errorf("decoded %q as %q", fen, p.FEN())
					return
				}
				if got := fmt.Sprint(shared.LegalMovesSAN()); got != wantSAN {
					errs <- fmt.Errorf("LegalMovesSAN differs under concurrency")
					return
				}
				_ = shared.ASCII(true)
				_ = shared.LegalMovesUCI()
				if _, err := shared.Move("Qxf6"); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
