package chess

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

// puzzleFiles are Lichess-format CSVs; the importers' testdata is the
// shared sample, puzzles_extra.csv adds puzzles from the public database.
var puzzleFiles = []string{
	"../../importers/testdata/puzzles.csv",
	"testdata/puzzles_extra.csv",
}

func loadTasks(t testing.TB) []schemas.Task {
	t.Helper()
	var tasks []schemas.Task
	for _, path := range puzzleFiles {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = importers.LichessCSV(context.Background(), f, path, importers.Options{}, func(task schemas.Task) error {
			tasks = append(tasks, task)
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(tasks) < 10 {
		t.Fatalf("loaded %d puzzles, expected at least 10", len(tasks))
	}
	return tasks
}

func taskLine(t testing.TB, task schemas.Task) []string {
	t.Helper()
	return strings.Fields(task.Answers[0])
}

func solverMoves(line []string) []string {
	var out []string
	for i := 1; i < len(line); i += 2 {
		out = append(out, line[i])
	}
	return out
}

// TestLichessPuzzlesSolve plays every imported puzzle's solution through,
// in UCI and in SAN, checking each opponent reply and the final state.
func TestLichessPuzzlesSolve(t *testing.T) {
	for _, task := range loadTasks(t) {
		line := taskLine(t, task)
		for _, notation := range []string{"uci", "san"} {
			t.Run(task.ID+"/"+notation, func(t *testing.T) {
				z, err := FromTask(task)
				if err != nil {
					t.Fatal(err)
				}
				if z.ID() != task.ID {
					t.Errorf("ID = %q, want %q", z.ID(), task.ID)
				}
				if z.LastMove().UCI != line[0] {
					t.Errorf("LastMove = %+v, want the opponent's %s", z.LastMove(), line[0])
				}
				if z.SideToMove() != z.SolverSide() {
					t.Errorf("SideToMove %s, SolverSide %s: the solver should be to move", z.SideToMove(), z.SolverSide())
				}
				for i := 1; i < len(line); i += 2 {
					if z.Done() {
						t.Fatalf("puzzle over (%s) before Moves[%d]", z.Status(), i)
					}
					text := line[i]
					if notation == "san" {
						mv, err := z.Position().Move(line[i])
						if err != nil {
							t.Fatal(err)
						}
						text = mv.SAN
					}
					out, err := z.Play(text)
					if err != nil {
						t.Fatalf("Moves[%d] %q: %v", i, text, err)
					}
					if !out.Correct || out.Failed || out.Played != line[i] || out.Expected != line[i] || out.Step != i/2 {
						t.Fatalf("Moves[%d] %q: outcome %+v", i, text, out)
					}
					last := i == len(line)-1
					if out.Solved && !last && !out.Mate {
						t.Fatalf("solved at Moves[%d] of %d without mate", i, len(line))
					}
					if !out.Solved && i+1 < len(line) {
						if out.OpponentReply != line[i+1] || out.OpponentReplySAN == "" || z.LastMove().UCI != line[i+1] {
							t.Fatalf("after Moves[%d]: reply %q/%q, last %+v; want %s", i, out.OpponentReply, out.OpponentReplySAN, z.LastMove(), line[i+1])
						}
					}
				}
				if !z.Solved() || z.Reward() != 1 || z.Status() != "solved" {
					t.Fatalf("status %s, reward %v; want solved", z.Status(), z.Reward())
				}
				done, total := z.Progress()
				if done != total || total != len(line)/2 {
					t.Errorf("Progress = %d/%d, want %d/%d", done, total, len(line)/2, len(line)/2)
				}
				if c := z.Counts(); c.Legal != len(line)/2 || c.Illegal+c.Unparseable+c.Ambiguous != 0 {
					t.Errorf("Counts = %+v", c)
				}
				if _, err := z.Play(line[1]); !errors.Is(err, ErrFinished) {
					t.Errorf("Play after solving: err %v, want ErrFinished", err)
				}
			})
		}
	}
}

func TestVerify(t *testing.T) {
	for _, task := range loadTasks(t) {
		line := taskLine(t, task)
		sol := solverMoves(line)
		z, _ := FromTask(task)
		wrong := ""
		for _, m := range z.LegalMovesUCI() {
			if m != line[1] {
				if mz, _ := FromTask(task); mz != nil {
					if out, _ := mz.Play(m); !out.Mate {
						wrong = m
						break
					}
				}
			}
		}
		cases := []struct {
			name  string
			moves []string
			want  float64
		}{
			{"solution", sol, 1},
			{"solution plus extra", append(append([]string{}, sol...), "a1a1", "junk"), 1},
			{"empty", nil, 0},
			{"gibberish", []string{"hello"}, 0},
			{"illegal", []string{"a1a1"}, 0},
		}
		if len(sol) > 1 {
			cases = append(cases, struct {
				name  string
				moves []string
				want  float64
			}{"truncated", sol[:len(sol)-1], 0})
		}
		if wrong != "" {
			cases = append(cases, struct {
				name  string
				moves []string
				want  float64
			}{"wrong first move", []string{wrong}, 0})
		}
		for _, c := range cases {
			got, err := Verify(task, c.moves)
			if err != nil {
				t.Fatalf("%s %s: %v", task.ID, c.name, err)
			}
			if got != c.want {
				t.Errorf("%s %s: Verify(%v) = %v, want %v", task.ID, c.name, c.moves, got, c.want)
			}
		}
	}
}

func TestFromTask(t *testing.T) {
	fen := "7k/5ppp/8/8/8/8/5PPP/RR4K1 b - - 0 1"
	cases := []struct {
		name    string
		task    schemas.Task
		wantErr string
	}{
		{"meta", schemas.Task{ID: "m", Domain: "chess", Meta: `{"fen":"` + fen + `","moves":["h8g8","a1a8"]}`}, ""},
		{"question and answer", schemas.Task{ID: "q", Question: fen, Answers: []string{"h8g8 a1a8"}}, ""},
		{"meta without moves falls back", schemas.Task{ID: "f", Question: fen, Answers: []string{"h8g8 a1a8"}, Meta: `{"rating":1500}`}, ""},
		{"other domain", schemas.Task{ID: "d", Domain: "math", Question: fen, Answers: []string{"h8g8 a1a8"}}, `puzzle d: task is domain "math"`},
		{"bad meta", schemas.Task{ID: "b", Meta: `{"fen":`}, "puzzle b: meta"},
		{"no moves", schemas.Task{ID: "n", Question: fen}, "puzzle n: expected an even number of moves"},
		{"illegal move", schemas.Task{ID: "i", Question: fen, Answers: []string{"h8g8 a1a9"}}, `puzzle i: Moves[1] "a1a9"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			z, err := FromTask(c.task)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrBadPuzzle) {
					t.Fatalf("err = %v, want ErrBadPuzzle containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out, err := z.Play("Ra8#"); err != nil || !out.Solved {
				t.Fatalf("Play: %+v, %v", out, err)
			}
		})
	}
}

func TestNewPuzzleErrors(t *testing.T) {
	start := "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
	cases := []struct {
		name  string
		fen   string
		moves []string
		want  []string // substrings of the error
	}{
		{"bad FEN", "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP w KQkq - 0 1", []string{"e2e4", "e7e5"}, []string{"bad FEN", "expected 8 ranks"}},
		{"one move", start, []string{"e2e4"}, []string{"found 1"}},
		{"odd line", start, []string{"e2e4", "e7e5", "g1f3"}, []string{"found 3"}},
		{"illegal opponent move", start, []string{"e2e5", "e7e5"}, []string{`Moves[0] "e2e5"`, "white to move", "illegal move", "the pawn on e2 cannot move to e5"}},
		{"illegal solver move", start, []string{"e2e4", "e7e4"}, []string{`Moves[1] "e7e4"`, "black to move"}},
		{"wrong side", start, []string{"e2e4", "d2d4"}, []string{`Moves[1] "d2d4"`, "the pawn on d2 is white's, and it is black's move"}},
		{"illegal late move", start, []string{"e2e4", "e7e5", "g1f3", "b8b6"}, []string{`Moves[3] "b8b6"`, "the knight on b8 cannot move to b6"}},
		{"not a move", start, []string{"e2e4", "hello"}, []string{`Moves[1] "hello"`, "not a move"}},
		{"move after mate", "7k/5ppp/8/8/8/8/5PPP/RR4K1 b - - 0 1", []string{"h8g8", "a1a8", "g8h8", "b1b8"}, []string{`Moves[2] "g8h8"`, "black is in check"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewPuzzle(c.fen, c.moves)
			if !errors.Is(err, ErrBadPuzzle) {
				t.Fatalf("err = %v, want ErrBadPuzzle", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// step is one Play call and what it must do.
type step struct {
	in      string
	err     error // ErrUnparseable, ErrIllegal, ErrAmbiguous, ErrFinished
	played  string
	correct bool
	solved  bool
	failed  bool
	mate    bool
	reply   string
	replySA string
}

func TestPlay(t *testing.T) {
	// Positions: the FEN is before the opponent's move Moves[0].
	const (
		checks     = "q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17"
		promote    = "6k1/4P3/8/8/8/8/8/4K3 b - - 0 1"
		fork       = "8/2q1P3/6k1/8/8/8/8/K7 b - - 0 1"
		castle     = "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1"
		blackCstl  = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
		enPassant  = "4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1"
		twoMates   = "7k/5ppp/8/8/8/8/5PPP/RR4K1 b - - 0 1"
		ambiguous  = "4k3/8/8/8/8/5N2/8/1N2K3 b - - 0 1"
		blackEP    = "4k3/8/8/8/3p4/8/4P3/4K3 w - - 0 1"
		blackPromo = "4k3/8/8/8/8/8/3p4/5K2 w - - 0 1"
	)
	line := func(s string) []string { return strings.Fields(s) }
	cases := []struct {
		name  string
		fen   string
		line  []string
		steps []step
	}{
		{"SAN with check marks", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "Be6+", played: "a2e6", correct: true, reply: "d7d8", replySA: "Kd8"},
			{in: "Qf8#", played: "f7f8", correct: true, solved: true, mate: true},
		}},
		{"SAN without check marks", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "Be6", played: "a2e6", correct: true, reply: "d7d8"},
			{in: "Qf8", played: "f7f8", correct: true, solved: true, mate: true},
		}},
		{"SAN with annotations", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: " Be6+!? ", played: "a2e6", correct: true, reply: "d7d8"},
			{in: "Qf8#!!", played: "f7f8", correct: true, solved: true, mate: true},
		}},
		{"wrong check marks are ignored", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "Be6#", played: "a2e6", correct: true, reply: "d7d8"},
			{in: "Qf8+", played: "f7f8", correct: true, solved: true, mate: true},
		}},
		{"promotion UCI", promote, line("g8h8 e7e8q"), []step{{in: "e7e8q", played: "e7e8q", correct: true, solved: true}}},
		{"promotion UCI upper case", promote, line("g8h8 e7e8q"), []step{{in: "e7e8Q", played: "e7e8q", correct: true, solved: true}}},
		{"promotion SAN with check", promote, line("g8h8 e7e8q"), []step{{in: "e8=Q+", played: "e7e8q", correct: true, solved: true}}},
		{"promotion SAN without =", promote, line("g8h8 e7e8q"), []step{{in: "e8Q", played: "e7e8q", correct: true, solved: true}}},
		{"promotion long algebraic", promote, line("g8h8 e7e8q"), []step{{in: "e7-e8=Q", played: "e7e8q", correct: true, solved: true}}},
		{"promotion without piece is ambiguous", promote, line("g8h8 e7e8q"), []step{
			{in: "e8", err: ErrAmbiguous},
			{in: "e7e8", err: ErrAmbiguous},
			{in: "e8=Q", played: "e7e8q", correct: true, solved: true},
		}},
		{"wrong promotion piece fails", promote, line("g8h8 e7e8q"), []step{{in: "e8=R+", played: "e7e8r", failed: true}}},
		{"underpromotion UCI", fork, line("g6f6 e7e8n"), []step{{in: "e7e8n", played: "e7e8n", correct: true, solved: true}}},
		{"underpromotion SAN", fork, line("g6f6 e7e8n"), []step{{in: "e8=N+", played: "e7e8n", correct: true, solved: true}}},
		{"queen instead of knight fails", fork, line("g6f6 e7e8n"), []step{{in: "e8=Q", played: "e7e8q", failed: true}}},
		{"black promotes", blackPromo, line("f1f2 d2d1q"), []step{{in: "d1=Q", played: "d2d1q", correct: true, solved: true}}},
		{"castle kingside UCI", castle, line("a8b8 e1g1"), []step{{in: "e1g1", played: "e1g1", correct: true, solved: true}}},
		{"castle kingside UCI king takes rook", castle, line("a8b8 e1g1"), []step{{in: "e1h1", played: "e1g1", correct: true, solved: true}}},
		{"castle kingside SAN", castle, line("a8b8 e1g1"), []step{{in: "O-O", played: "e1g1", correct: true, solved: true}}},
		{"castle kingside zeros", castle, line("a8b8 e1g1"), []step{{in: "0-0", played: "e1g1", correct: true, solved: true}}},
		{"line written king takes rook", castle, line("a8b8 e1h1"), []step{{in: "O-O", played: "e1g1", correct: true, solved: true}}},
		{"castle queenside UCI", castle, line("a8b8 e1c1"), []step{{in: "e1c1", played: "e1c1", correct: true, solved: true}}},
		{"castle queenside UCI king takes rook", castle, line("a8b8 e1c1"), []step{{in: "e1a1", played: "e1c1", correct: true, solved: true}}},
		{"castle queenside SAN", castle, line("a8b8 e1c1"), []step{{in: "O-O-O", played: "e1c1", correct: true, solved: true}}},
		{"castle queenside zeros", castle, line("a8b8 e1c1"), []step{{in: "0-0-0", played: "e1c1", correct: true, solved: true}}},
		{"black castles kingside", blackCstl, line("a1b1 e8g8"), []step{{in: "O-O", played: "e8g8", correct: true, solved: true}}},
		{"black castles kingside UCI", blackCstl, line("a1b1 e8g8"), []step{{in: "e8h8", played: "e8g8", correct: true, solved: true}}},
		{"black castles queenside", blackCstl, line("a1b1 e8c8"), []step{{in: "0-0-0", played: "e8c8", correct: true, solved: true}}},
		{"castling through check is illegal", castle, line("h8f8 e1c1"), []step{
			{in: "O-O", err: ErrIllegal},
			{in: "e1g1", err: ErrIllegal},
			{in: "e1h1", err: ErrIllegal},
			{in: "O-O-O", played: "e1c1", correct: true, solved: true},
		}},
		{"wrong castling side fails", castle, line("a8b8 e1c1"), []step{{in: "O-O", played: "e1g1", failed: true}}},
		{"en passant SAN", enPassant, line("d7d5 e5d6"), []step{{in: "exd6", played: "e5d6", correct: true, solved: true}}},
		{"en passant UCI", enPassant, line("d7d5 e5d6"), []step{{in: "e5d6", played: "e5d6", correct: true, solved: true}}},
		{"en passant e.p.", enPassant, line("d7d5 e5d6"), []step{{in: "exd6 e.p.", played: "e5d6", correct: true, solved: true}}},
		{"en passant without x", enPassant, line("d7d5 e5d6"), []step{{in: "ed6", played: "e5d6", correct: true, solved: true}}},
		{"pushing past en passant fails", enPassant, line("d7d5 e5d6"), []step{{in: "e6", played: "e5e6", failed: true}}},
		{"black en passant", blackEP, line("e2e4 d4e3"), []step{{in: "dxe3", played: "d4e3", correct: true, solved: true}}},
		{"mate in one, the solution's mate", twoMates, line("h8g8 a1a8"), []step{{in: "Ra8#", played: "a1a8", correct: true, solved: true, mate: true}}},
		{"mate in one, the other mate", twoMates, line("h8g8 a1a8"), []step{{in: "Rb8#", played: "b1b8", correct: true, solved: true, mate: true}}},
		{"mate in one, other mate in UCI", twoMates, line("h8g8 a1a8"), []step{{in: "b1b8", played: "b1b8", correct: true, solved: true, mate: true}}},
		{"mate in one, non-mating move fails", twoMates, line("h8g8 a1a8"), []step{{in: "Ra7", played: "a1a7", failed: true}}},
		{"long algebraic wrong move fails", twoMates, line("h8g8 a1a8"), []step{{in: "Rb1-b7", played: "b1b7", failed: true}}},
		{"early mate wins", twoMates, line("h8g8 a1a7 h7h6 b1b8"), []step{{in: "Rb8#", played: "b1b8", correct: true, solved: true, mate: true}}},
		{"wrong but legal fails and ends", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "Qxg7", played: "f7g7", failed: true},
			{in: "Be6+", err: ErrFinished},
		}},
		{"illegal does not fail", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "Be5", err: ErrIllegal},
			{in: "a2e7", err: ErrIllegal},
			{in: "Kf3", err: ErrIllegal},
			{in: "O-O", err: ErrIllegal},
			{in: "e8d8", err: ErrIllegal},
			{in: "0000", err: ErrIllegal},
			{in: "Be6+", played: "a2e6", correct: true, reply: "d7d8"},
			{in: "Qf8#", played: "f7f8", correct: true, solved: true, mate: true},
		}},
		{"gibberish does not fail", checks, line("e8d7 a2e6 d7d8 f7f8"), []step{
			{in: "hello", err: ErrUnparseable},
			{in: "", err: ErrUnparseable},
			{in: "Bishop to e6", err: ErrUnparseable},
			{in: "Be9", err: ErrUnparseable},
			{in: "1. Be6", err: ErrUnparseable},
			{in: "be6", err: ErrIllegal}, // a b-pawn to e6: a move, not a legal one
			{in: "Be6+", played: "a2e6", correct: true, reply: "d7d8"},
		}},
		{"ambiguous SAN does not fail", ambiguous, line("e8d8 b1d2"), []step{
			{in: "Nd2", err: ErrAmbiguous},
			{in: "Nbd2", played: "b1d2", correct: true, solved: true},
		}},
		{"disambiguated the other knight fails", ambiguous, line("e8d8 b1d2"), []step{{in: "Nfd2", played: "f3d2", failed: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			z, err := NewPuzzle(c.fen, c.line)
			if err != nil {
				t.Fatal(err)
			}
			var want Counts
			for i, s := range c.steps {
				before := z.FEN()
				out, err := z.Play(s.in)
				if s.err != nil {
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d %q: err = %v, want %v", i, s.in, err, s.err)
					}
					if z.FEN() != before {
						t.Fatalf("step %d %q: refused move changed the position", i, s.in)
					}
					if s.err != ErrFinished && z.Done() {
						t.Fatalf("step %d %q: refused move ended the puzzle (%s)", i, s.in, z.Status())
					}
					var me *MoveError
					if s.err != ErrFinished && (!errors.As(err, &me) || me.Reason == "") {
						t.Fatalf("step %d %q: err %v is not a *MoveError with a reason", i, s.in, err)
					}
					switch s.err {
					case ErrUnparseable:
						want.Unparseable++
					case ErrIllegal:
						want.Illegal++
					case ErrAmbiguous:
						want.Ambiguous++
						if !errors.Is(err, ErrIllegal) {
							t.Errorf("ambiguous error is not also ErrIllegal")
						}
					}
					continue
				}
				want.Legal++
				if err != nil {
					t.Fatalf("step %d %q: %v", i, s.in, err)
				}
				got := step{in: s.in, played: out.Played, correct: out.Correct, solved: out.Solved, failed: out.Failed,
					mate: out.Mate, reply: out.OpponentReply}
				if s.replySA != "" {
					got.replySA = out.OpponentReplySAN
				}
				if !reflect.DeepEqual(got, s) {
					t.Fatalf("step %d %q:\n got %+v\nwant %+v\noutcome %+v", i, s.in, got, s, out)
				}
				if out.PlayedSAN == "" || out.Expected == "" || out.ExpectedSAN == "" {
					t.Errorf("step %d: outcome lacks notation: %+v", i, out)
				}
				if s.failed && (z.FEN() != before || z.Reward() != 0 || !z.Failed()) {
					t.Errorf("step %d: after a wrong move: FEN changed %v, reward %v, failed %v", i, z.FEN() != before, z.Reward(), z.Failed())
				}
				if s.solved && (z.Reward() != 1 || !z.Solved() || z.LastMove().UCI != s.played) {
					t.Errorf("step %d: after solving: reward %v, solved %v, last %+v", i, z.Reward(), z.Solved(), z.LastMove())
				}
			}
			if got := z.Counts(); got != want {
				t.Errorf("Counts = %+v, want %+v", got, want)
			}
		})
	}
}

func TestPuzzleHelpers(t *testing.T) {
	z, err := NewPuzzle("q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17", []string{"e8d7", "a2e6", "d7d8", "f7f8"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := z.FEN(), "q5nr/1ppknQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 w - - 1 18"; got != want {
		t.Errorf("FEN = %q, want %q", got, want)
	}
	if z.SideToMove() != "white" || z.SolverSide() != "white" || z.MoveNumber() != 18 || z.InCheck() {
		t.Errorf("side %s solver %s move %d check %v", z.SideToMove(), z.SolverSide(), z.MoveNumber(), z.InCheck())
	}
	if got := z.LastMove(); got != (Move{UCI: "e8d7", SAN: "Kd7"}) {
		t.Errorf("LastMove = %+v", got)
	}
	if index(z.LegalMovesSAN(), "Be6+") < 0 || index(z.LegalMovesUCI(), "a2e6") < 0 {
		t.Errorf("legal moves lack the solution: %v", z.LegalMovesSAN())
	}
	if !strings.HasPrefix(z.ASCII(false), "8 q . . . . . n r\n7 . p p k n Q p p\n") {
		t.Errorf("ASCII:\n%s", z.ASCII(false))
	}
	if done, total := z.Progress(); done != 0 || total != 2 {
		t.Errorf("Progress = %d/%d", done, total)
	}
	out, err := z.Play("Be6+")
	if err != nil {
		t.Fatal(err)
	}
	if out.PlayedSAN != "Be6+" || out.OpponentReplySAN != "Kd8" {
		t.Errorf("outcome %+v", out)
	}
	if z.LastMove() != (Move{UCI: "d7d8", SAN: "Kd8"}) || z.MoveNumber() != 19 || z.SideToMove() != "white" {
		t.Errorf("after one step: last %+v move %d side %s", z.LastMove(), z.MoveNumber(), z.SideToMove())
	}
	if done, _ := z.Progress(); done != 1 {
		t.Errorf("Progress done = %d, want 1", done)
	}
}
