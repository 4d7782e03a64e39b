package chess

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/schemas"
)

var (
	// ErrBadPuzzle is wrapped by every error about a puzzle that cannot be
	// played: a bad FEN, a short or odd-length line, an illegal line move.
	ErrBadPuzzle = errors.New("bad chess puzzle")
	// ErrFinished is returned by Play once the puzzle is solved or failed.
	ErrFinished = errors.New("puzzle is over")
)

// Outcome is what one legal solver move did.
type Outcome struct {
	Step        int    // the solver's move number in the puzzle, from 0
	Played      string // UCI of the move played
	PlayedSAN   string
	Expected    string // UCI of the solution's move at this step
	ExpectedSAN string
	Correct     bool // the move is the solution's, or gives mate
	Mate        bool // the move gives checkmate
	Solved      bool // the puzzle is now solved
	Failed      bool // the puzzle is now failed (a legal wrong move)
	// The opponent's automatic reply after a correct move that does not
	// end the puzzle; empty otherwise.
	OpponentReply    string
	OpponentReplySAN string
}

// Counts tallies what Play was given, for retry budgets.
type Counts struct {
	Legal       int // legal moves played (right or wrong)
	Unparseable int // texts that were not a move
	Illegal     int // moves not legal in the position, ambiguous SAN excluded
	Ambiguous   int // SAN that named several legal moves
}

type state int

const (
	playing state = iota
	solved
	failed
)

func (s state) String() string {
	return [...]string{"playing", "solved", "failed"}[s]
}

// Puzzle is one Lichess-style puzzle being played. Play changes it; the
// other methods only read it.
type Puzzle struct {
	id     string
	solver string   // "white" or "black"
	line   []string // UCI, normalised (e1h1 becomes e1g1)
	pos    *Position
	ply    int // index in line of the solver's next move
	last   Move
	state  state
	counts Counts
}

// NewPuzzle builds a puzzle from a FEN and its line (Lichess convention: the
// FEN is the position before the opponent's move moves[0]; the solver plays
// the odd-indexed moves). The whole line must be legal, at least two moves
// long and end with a solver's move. moves[0] is applied before returning.
func NewPuzzle(fen string, moves []string) (*Puzzle, error) {
	return newPuzzle("", fen, moves)
}

// FromTask builds the puzzle of a chess task: the FEN and moves of its
// importers.LichessMeta, or else Question as the FEN and Answers[0] as the
// space-separated line.
func FromTask(t schemas.Task) (*Puzzle, error) {
	if t.Domain != "" && t.Domain != "chess" {
		return nil, fmt.Errorf("%s: task is domain %q, not chess: %w", label(t.ID), t.Domain, ErrBadPuzzle)
	}
	var meta importers.LichessMeta
	if strings.TrimSpace(t.Meta) != "" {
		if err := json.Unmarshal([]byte(t.Meta), &meta); err != nil {
			return nil, fmt.Errorf("%s: meta: %v: %w", label(t.ID), err, ErrBadPuzzle)
		}
	}
	fen, moves := meta.FEN, meta.Moves
	if fen == "" {
		fen = t.Question
	}
	if len(moves) == 0 && len(t.Answers) > 0 {
		moves = strings.Fields(t.Answers[0])
	}
	return newPuzzle(t.ID, fen, moves)
}

func label(id string) string {
	if id == "" {
		return "puzzle"
	}
	return "puzzle " + id
}

func newPuzzle(id, fen string, moves []string) (*Puzzle, error) {
	start, err := NewPosition(fen)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", label(id), err, ErrBadPuzzle)
	}
	if len(moves) < 2 || len(moves)%2 != 0 {
		return nil, fmt.Errorf("%s: expected an even number of moves, at least 2 (the opponent's move, then the solver's), found %d: %w",
			label(id), len(moves), ErrBadPuzzle)
	}
	z := &Puzzle{id: id, line: make([]string, len(moves)), ply: 1, solver: "white"}
	if start.SideToMove() == "white" {
		z.solver = "black"
	}
	pos := start
	for i, text := range moves {
		m, merr := pos.parse(text)
		if merr != nil {
			return nil, fmt.Errorf("%s: Moves[%d] %q (%s to move in %s): %v: %s: %w",
				label(id), i, cut(text, maxMoveText), pos.SideToMove(), pos.FEN(), merr.Kind, merr.Reason, ErrBadPuzzle)
		}
		z.line[i] = uci(m)
		if i == 0 {
			z.last = Move{UCI: z.line[0], SAN: pos.encodeSAN(m)}
		}
		pos = pos.after(m)
		if i == 0 {
			z.pos = pos
		}
	}
	return z, nil
}

// Play plays the solver's move given as text (see ParseMove). A *MoveError
// (ErrUnparseable, ErrIllegal, ErrAmbiguous) leaves the puzzle as it was
// and is only counted; after the puzzle ends Play returns ErrFinished. A
// legal move is judged: the solution's move, or any mate, is correct and
// the opponent's reply follows; any other move fails the puzzle, which then
// stays at the position where the wrong move was made.
func (z *Puzzle) Play(text string) (Outcome, error) {
	step := (z.ply - 1) / 2
	if z.state != playing {
		return Outcome{Step: step}, fmt.Errorf("%s is %s: %w", label(z.id), z.state, ErrFinished)
	}
	m, err := z.pos.parse(text)
	if err != nil {
		switch err.Kind {
		case ErrUnparseable:
			z.counts.Unparseable++
		case ErrAmbiguous:
			z.counts.Ambiguous++
		default:
			z.counts.Illegal++
		}
		return Outcome{Step: step}, err
	}
	z.counts.Legal++
	exp, eerr := z.pos.Move(z.line[z.ply])
	if eerr != nil { // NewPuzzle replayed the line, so this cannot happen
		return Outcome{Step: step}, fmt.Errorf("%s: replay Moves[%d]: %w", label(z.id), z.ply, eerr)
	}
	next := z.pos.after(m)
	out := Outcome{
		Step:        step,
		Played:      uci(m),
		PlayedSAN:   z.pos.encodeSAN(m),
		Expected:    exp.UCI,
		ExpectedSAN: exp.SAN,
		Mate:        next.Checkmate(),
	}
	if out.Played != exp.UCI && !out.Mate {
		out.Failed = true
		z.state = failed
		return out, nil
	}
	out.Correct = true
	z.pos, z.last = next, Move{UCI: out.Played, SAN: out.PlayedSAN}
	z.ply++
	if out.Mate || z.ply == len(z.line) {
		out.Solved = true
		z.state = solved
		return out, nil
	}
	reply, rerr := z.pos.parse(z.line[z.ply])
	if rerr != nil {
		return out, fmt.Errorf("%s: replay Moves[%d]: %w", label(z.id), z.ply, rerr)
	}
	z.last = Move{UCI: uci(reply), SAN: z.pos.encodeSAN(reply)}
	z.pos = z.pos.after(reply)
	z.ply++
	out.OpponentReply, out.OpponentReplySAN = z.last.UCI, z.last.SAN
	return out, nil
}

// Verify replays a whole answer, the solver's moves only, against the task's
// puzzle and returns 1 if it solves it, else 0. Moves after the end are
// ignored; a move that is not legal or not a move scores 0, as does a line
// that stops early. The error is only for a task that cannot be played.
func Verify(task schemas.Task, solverMoves []string) (float64, error) {
	z, err := FromTask(task)
	if err != nil {
		return 0, err
	}
	for _, text := range solverMoves {
		if z.Done() {
			break
		}
		if _, err := z.Play(text); err != nil {
			return 0, nil
		}
	}
	return z.Reward(), nil
}

// ID is the puzzle's id ("" from NewPuzzle).
func (z *Puzzle) ID() string { return z.id }

// Position is the current position (the solver to move while playing).
func (z *Puzzle) Position() *Position { return z.pos }

// FEN of the current position.
func (z *Puzzle) FEN() string { return z.pos.FEN() }

// ASCII draws the current position (see Position.ASCII).
func (z *Puzzle) ASCII(fromSideToMove bool) string { return z.pos.ASCII(fromSideToMove) }

// LegalMovesUCI lists the legal moves of the current position.
func (z *Puzzle) LegalMovesUCI() []string { return z.pos.LegalMovesUCI() }

// LegalMovesSAN lists the legal moves of the current position in SAN, in
// the order of LegalMovesUCI.
func (z *Puzzle) LegalMovesSAN() []string { return z.pos.LegalMovesSAN() }

// SideToMove is "white" or "black".
func (z *Puzzle) SideToMove() string { return z.pos.SideToMove() }

// SolverSide is the colour the solver plays, "white" or "black".
func (z *Puzzle) SolverSide() string { return z.solver }

// MoveNumber is the fullmove number of the current position.
func (z *Puzzle) MoveNumber() int { return z.pos.MoveNumber() }

// InCheck reports whether the side to move is in check.
func (z *Puzzle) InCheck() bool { return z.pos.InCheck() }

// LastMove is the last move on the board: the opponent's while the puzzle
// is being played, the solver's once it is solved.
func (z *Puzzle) LastMove() Move { return z.last }

// Progress returns how many solver moves were played correctly and how many
// the solution has.
func (z *Puzzle) Progress() (done, total int) { return z.ply / 2, len(z.line) / 2 }

// Status is "playing", "solved" or "failed".
func (z *Puzzle) Status() string { return z.state.String() }

// Solved reports whether the puzzle is solved.
func (z *Puzzle) Solved() bool { return z.state == solved }

// Failed reports whether a wrong move ended the puzzle.
func (z *Puzzle) Failed() bool { return z.state == failed }

// Done reports whether the puzzle is over.
func (z *Puzzle) Done() bool { return z.state != playing }

// Reward is 1 if the puzzle is solved, else 0.
func (z *Puzzle) Reward() float64 {
	if z.state == solved {
		return 1
	}
	return 0
}

// Counts tallies the moves and refused texts Play was given.
func (z *Puzzle) Counts() Counts { return z.counts }
