package chess

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// baseline is h0, the paper's as the reference code runs it: side, FEN,
// board and every legal move shown, one UCI move a reply, nine turns, one
// format and one illegal-move retry (see h0.star).
//
//go:embed h0.star
var baseline []byte

// compactHarness is h0-compact: the position as FEN and board without the
// legal moves, one move a reply in <move></move> tags (UCI or SAN), the
// paper's budgets: whale's h0 before the reference's presentation.
//
//go:embed h0-compact.star
var compactHarness []byte

// Domain is the chess-puzzle domain for the episode loop. It needs no
// outside tool.
type Domain struct{}

// NewDomain returns the chess domain.
func NewDomain() *Domain { return &Domain{} }

var _ episode.Domain = (*Domain)(nil)

// Name is "chess".
func (d *Domain) Name() string { return "chess" }

// Contract is the domain's harness contract, Contract().
func (d *Domain) Contract() *harness.Contract { return Contract() }

// HookMeta hides the puzzle's solution line (meta "moves" of the Lichess
// layout) from hooks: a harness may present the position but not be told
// the answer. It implements episode.MetaFilter.
func (d *Domain) HookMeta(meta map[string]any) map[string]any {
	if _, ok := meta["moves"]; !ok {
		return meta
	}
	out := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "moves" {
			out[k] = v
		}
	}
	return out
}

// Baseline is the source of h0.
func (d *Domain) Baseline() []byte { return append([]byte(nil), baseline...) }

// Harnesses are the domain's built-in harnesses by name, the names an
// experiment's harness.initial may give: "h0" (Baseline, the paper's) and
// "h0-compact".
func Harnesses() map[string][]byte {
	return map[string][]byte{
		"h0":         append([]byte(nil), baseline...),
		"h0-compact": append([]byte(nil), compactHarness...),
	}
}

// presentation is how observations show the position: the harness's
// BOARD_FORMAT, SHOW_LEGAL_MOVES and MOVE_FORMAT.
type presentation struct {
	board      string // fen, ascii or both
	showLegal  bool
	moveFormat string // uci or san
}

// NewEnv builds the task's puzzle (FromTask; the opponent's first move is
// played) and reads the presentation constants from h (the contract's
// defaults when h is nil). A task that is not a playable puzzle is an
// error naming it.
func (d *Domain) NewEnv(_ context.Context, task schemas.Task, h *harness.Harness) (episode.Env, error) {
	z, err := FromTask(task)
	if err != nil {
		return nil, err
	}
	p, err := presentationOf(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label(task.ID), err)
	}
	return &Env{task: task, puzzle: z, show: p}, nil
}

func presentationOf(h *harness.Harness) (presentation, error) {
	names := []string{"BOARD_FORMAT", "SHOW_LEGAL_MOVES", "MOVE_FORMAT"}
	if h == nil {
		c := Contract()
		v := make([]any, len(names))
		for i, n := range names {
			spec, _ := c.Const(n)
			v[i] = spec.Default
		}
		return presentation{board: v[0].(string), showLegal: v[1].(bool), moveFormat: v[2].(string)}, nil
	}
	// Harness getters panic on a constant their contract lacks: a harness
	// loaded for another domain is the caller's mistake, reported here.
	for _, n := range names {
		if _, ok := h.Contract().Const(n); !ok {
			return presentation{}, fmt.Errorf("harness %s was loaded with contract %q, which has no %s: load it with the chess contract",
				h.Filename(), h.Contract().Name, n)
		}
	}
	return presentation{board: h.String("BOARD_FORMAT"), showLegal: h.Bool("SHOW_LEGAL_MOVES"), moveFormat: h.String("MOVE_FORMAT")}, nil
}

// Env is one puzzle being played. It is not safe for concurrent use.
type Env struct {
	task   schemas.Task
	puzzle *Puzzle
	show   presentation
	played []Move // the solver's legal moves, in order
}

// Reset returns the position after the opponent's first move.
//
// Every observation is a dict with:
//   - "fen": the position (always: the helpers take it);
//   - "board": the board as board_ascii(fen, False) draws it, white at the
//     bottom, when BOARD_FORMAT is "ascii" or "both", else "";
//   - "side_to_move": "white" or "black", the solver's side;
//   - "in_check": whether the solver's king is in check;
//   - "legal_moves": the legal moves in MOVE_FORMAT, only when
//     SHOW_LEGAL_MOVES is on;
//   - "last_move": the opponent's last move in MOVE_FORMAT;
//   - "moves_played": the solver's moves so far in MOVE_FORMAT (a list);
//   - "question": all of it as one text, as BOARD_FORMAT and
//     SHOW_LEGAL_MOVES ask, for the default format_observation (USER_PROMPT
//     "{question}").
func (e *Env) Reset(context.Context) (map[string]any, error) {
	return e.observation(), nil
}

func (e *Env) notation(m Move) string {
	if e.show.moveFormat == "san" {
		return m.SAN
	}
	return m.UCI
}

func (e *Env) observation() map[string]any {
	z := e.puzzle
	obs := map[string]any{
		"fen":          z.FEN(),
		"board":        "",
		"side_to_move": z.SideToMove(),
		"in_check":     z.InCheck(),
		"last_move":    e.notation(z.LastMove()),
	}
	if e.show.board != "fen" {
		obs["board"] = z.ASCII(false)
	}
	var legal []string
	if e.show.showLegal {
		if e.show.moveFormat == "san" {
			legal = z.LegalMovesSAN()
		} else {
			legal = z.LegalMovesUCI()
		}
		obs["legal_moves"] = legal
	}
	played := make([]string, len(e.played))
	for i, m := range e.played {
		played[i] = e.notation(m)
	}
	obs["moves_played"] = played

	var b strings.Builder
	if len(e.played) > 0 {
		b.WriteString("Correct. ")
	}
	fmt.Fprintf(&b, "Your opponent played %s. You play %s.", obs["last_move"], z.SideToMove())
	if z.InCheck() {
		b.WriteString(" You are in check.")
	}
	b.WriteString("\n")
	if e.show.board != "ascii" {
		fmt.Fprintf(&b, "FEN: %s\n", z.FEN())
	}
	if e.show.board != "fen" {
		fmt.Fprintf(&b, "%s\n", obs["board"])
	}
	if e.show.showLegal {
		fmt.Fprintf(&b, "Legal moves: %s\n", strings.Join(legal, ", "))
	}
	b.WriteString("What is your move?")
	obs["question"] = b.String()
	return obs
}

// Step plays a move (an answer action's text is read as a move too).
// Text that is not a move, an illegal move or ambiguous SAN is Illegal
// (the loop applies ILLEGAL_RETRIES) and leaves the position as it was.
// A legal wrong move ends the episode with reward 0; a right one (or any
// mate) either solves the puzzle, reward 1, or is answered by the
// opponent's reply, whose position is the next observation.
func (e *Env) Step(_ context.Context, a harness.Action) (episode.Step, error) {
	var text string
	switch a.Kind {
	case "move":
		text = a.Move
	case "answer":
		text = a.Answer
	case "tool":
		return episode.Step{Illegal: fmt.Sprintf("there are no tools in chess (asked for %q): reply with a move", a.Tool)}, nil
	default:
		return episode.Step{}, fmt.Errorf("%s: step with action kind %q", label(e.task.ID), a.Kind)
	}
	out, err := e.puzzle.Play(strings.TrimSpace(text))
	var me *MoveError
	if errors.As(err, &me) {
		return episode.Step{Illegal: me.Error()}, nil
	}
	if err != nil {
		return episode.Step{}, fmt.Errorf("%s: play %q: %w", label(e.task.ID), cut(text, maxMoveText), err)
	}
	e.played = append(e.played, Move{UCI: out.Played, SAN: out.PlayedSAN})
	switch {
	case out.Solved:
		return episode.Step{Done: true, Outcome: e.outcome()}, nil
	case out.Failed:
		return episode.Step{Done: true, Outcome: e.outcome()}, nil
	}
	return episode.Step{Observation: e.observation()}, nil
}

// outcome is the puzzle's verdict; Answer is the solver's moves in UCI,
// space-separated, as Verify replays them.
func (e *Env) outcome() episode.Outcome {
	moves := make([]string, len(e.played))
	for i, m := range e.played {
		moves[i] = m.UCI
	}
	return episode.Outcome{Reward: e.puzzle.Reward(), Correct: e.puzzle.Solved(), Answer: strings.Join(moves, " ")}
}

// Final scores an episode that ended before the puzzle did: reward 0, the
// moves played so far as the answer.
func (e *Env) Final(context.Context) episode.Outcome { return e.outcome() }
