package chess

import (
	"context"
	"errors"
	"fmt"

	"github.com/whalerun/whale/harness"
)

// maxFENBytes and maxMoveTextBytes bound helper arguments: a FEN is under
// 100 bytes and a move under 16, so anything far longer is a harness bug,
// refused before any parsing work.
const (
	maxFENBytes      = 256
	maxMoveTextBytes = 256
)

const contractIntro = `

Domain: chess puzzles. The solver plays the puzzle's moves one at a time;
after each legal move the environment plays the opponent's reply and the
next observation shows the new position. A legal wrong move fails the
puzzle, any mate wins. The harness decides how the position is shown and
how a reply is read into a move (` + "`parse_action`" + ` returning
` + "`{\"kind\": \"move\", \"move\": ...}`" + `); it may not play, search or
evaluate moves itself, and the helpers below only describe a position or
read a move, they never suggest one.`

// Contract is the chess domain's harness contract: the base contract with
// the paper's chess h0 budgets (9 turns, one format and one illegal-move
// retry), presentation constants, and read-only helpers that describe a
// position or read a move. No helper plays, searches or evaluates: the
// harness may shape what the model sees, not choose its moves.
func Contract() *harness.Contract {
	base := harness.Base()
	return base.Extend(harness.Contract{
		Name:  "chess",
		Intro: base.Intro + contractIntro,
		Constants: []harness.ConstSpec{
			base.WithDefault("MAX_TURNS", 9),
			base.WithDefault("FORMAT_RETRIES", 1),
			base.WithDefault("ILLEGAL_RETRIES", 1),
			{
				Name: "BOARD_FORMAT", Type: harness.TypeString, Default: "both",
				Shape: harness.Enum{"fen", "ascii", "both"},
				Doc: "How observations show the position: `\"fen\"` (the FEN string), `\"ascii\"` (the board as " +
					"board_ascii draws it) or `\"both\"`. A format_observation of your own can draw it any way " +
					"with the helpers below.",
			},
			{
				Name: "SHOW_LEGAL_MOVES", Type: harness.TypeBool, Default: false,
				Doc: "Whether observations list the legal moves of the position (in MOVE_FORMAT).",
			},
			{
				Name: "MOVE_FORMAT", Type: harness.TypeString, Default: "uci",
				Shape: harness.Enum{"uci", "san"},
				Doc: "Notation used when moves are shown to the model: `\"uci\"` (e2e4, e7e8q) or `\"san\"` (e4, e8=Q). " +
					"The environment accepts either notation from parse_action regardless.",
			},
		},
		Helpers: map[string]harness.Builtin{
			"board_ascii": {
				Params:  []string{"fen", "flip"},
				Returns: "str",
				Doc: "The board as 8 lines of text, rank numbers on the left and files below, white pieces in upper " +
					"case, black in lower case, empty squares as `.`. White is at the bottom unless `flip` is True " +
					"and black is to move (the board as the side to move sees it). Fails on an invalid FEN.",
				Fn: boardASCII,
			},
			"legal_moves": {
				Params:  []string{"fen", "notation"},
				Returns: "list of str",
				Doc: "The legal moves of the position, `notation` `\"uci\"` or `\"san\"`, grouped by piece (king, queen, " +
					"rook, bishop, knight, pawn), then by origin square, castling last; the two lists are parallel. " +
					"Empty when the side to move is mated or stalemated. Fails on an invalid FEN.",
				Fn: legalMoves,
			},
			"side_to_move": {
				Params:  []string{"fen"},
				Returns: "str",
				Doc:     "`\"white\"` or `\"black\"`. Fails on an invalid FEN.",
				Fn:      sideToMove,
			},
			"in_check": {
				Params:  []string{"fen"},
				Returns: "bool",
				Doc:     "Whether the side to move is in check. Fails on an invalid FEN.",
				Fn:      inCheck,
			},
			"parse_move": {
				Params:  []string{"fen", "text"},
				Returns: "str or None",
				Doc: "The UCI of the legal move that `text` names, or None when it names none (not a move, illegal, " +
					"or ambiguous SAN). `text` is exactly one move in UCI (e2e4, e7e8q, e1g1) or SAN (Nf3, exd5, " +
					"e8=Q, O-O), optionally followed by +, #, ! or ?; move numbers and other words are not accepted, " +
					"so extract the move from the reply first (e.g. with `re`). Fails on an invalid FEN.",
				Fn: parseMoveHelper,
			},
		},
	})
}

func stringArg(args []any, i int, name string, limit int) (string, error) {
	s, err := harness.StringArg(args, i, name)
	if err != nil {
		return "", err
	}
	if len(s) > limit {
		return "", fmt.Errorf("%s: %d bytes, more than the limit of %d", name, len(s), limit)
	}
	return s, nil
}

func positionArg(args []any) (*Position, error) {
	fen, err := stringArg(args, 0, "fen", maxFENBytes)
	if err != nil {
		return nil, err
	}
	return NewPosition(fen)
}

func boardASCII(_ context.Context, args []any) (any, error) {
	p, err := positionArg(args)
	if err != nil {
		return nil, err
	}
	flip, ok := args[1].(bool)
	if !ok {
		return nil, fmt.Errorf("flip: want a bool, got %T", args[1])
	}
	return p.ASCII(flip), nil
}

func legalMoves(_ context.Context, args []any) (any, error) {
	p, err := positionArg(args)
	if err != nil {
		return nil, err
	}
	switch args[1] {
	case "uci":
		return p.LegalMovesUCI(), nil
	case "san":
		return p.LegalMovesSAN(), nil
	}
	return nil, fmt.Errorf("notation: want \"uci\" or \"san\", got %v", args[1])
}

func sideToMove(_ context.Context, args []any) (any, error) {
	p, err := positionArg(args)
	if err != nil {
		return nil, err
	}
	return p.SideToMove(), nil
}

func inCheck(_ context.Context, args []any) (any, error) {
	p, err := positionArg(args)
	if err != nil {
		return nil, err
	}
	return p.InCheck(), nil
}

func parseMoveHelper(_ context.Context, args []any) (any, error) {
	fen, err := stringArg(args, 0, "fen", maxFENBytes)
	if err != nil {
		return nil, err
	}
	text, ok := args[1].(string)
	if !ok {
		return nil, fmt.Errorf("text: want a string, got %T", args[1])
	}
	if len(text) > maxMoveTextBytes {
		// No move is this long; the text names none.
		return nil, nil
	}
	uci, err := ParseMove(fen, text)
	var me *MoveError
	if errors.As(err, &me) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return uci, nil
}
