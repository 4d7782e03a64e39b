package chess

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/harnesstest"
)

func TestContractValidates(t *testing.T) {
	c := Contract()
	harnesstest.CheckDoc(t, c)
	// The paper's chess h0 budgets, and the base's ranges kept.
	for name, want := range map[string]int64{"MAX_TURNS": 9, "FORMAT_RETRIES": 1, "ILLEGAL_RETRIES": 1} {
		k, ok := c.Const(name)
		if !ok {
			t.Fatalf("no constant %s", name)
		}
		if k.Default != int(want) || k.Min == nil || k.Max == nil {
			t.Errorf("%s: default %v, min %v, max %v", name, k.Default, k.Min, k.Max)
		}
	}
}

// evalHelper evaluates expr from Starlark under the chess contract.
func evalHelper(t *testing.T, expr string, obs map[string]any) (string, error) {
	t.Helper()
	return harnesstest.Eval(t, Contract(), expr, obs)
}

const (
	// Black to move, in check from the bishop on b5.
	checkFEN = "rnbqkbnr/ppp2ppp/8/1B1pp3/4P3/8/PPPP1PPP/RNBQK1NR b KQkq - 1 3"
	// Fool's mate: white is mated.
	mateFEN = "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3"
)

func TestContractHelpers(t *testing.T) {
	tests := []struct {
		name, expr string
		obs        map[string]any
		want       string // JSON; empty when an error is wanted
		wantErr    string
	}{
		{"legal moves uci", `legal_moves(obs["fen"], "uci")`, map[string]any{"fen": checkFEN},
			`["e8e7","d8d7","c8d7","b8c6","b8d7","c7c6"]`, ""},
		{"legal moves san", `legal_moves(obs["fen"], "san")`, map[string]any{"fen": checkFEN},
			`["Ke7","Qd7","Bd7","Nc6","Nd7","c6"]`, ""},
		{"no legal moves when mated", `legal_moves(obs["fen"], "uci")`, map[string]any{"fen": mateFEN}, `[]`, ""},
		{"count at start", `len(legal_moves(obs["fen"], "san"))`, map[string]any{"fen": startFEN}, `20`, ""},
		{"bad notation", `legal_moves(obs["fen"], "lan")`, map[string]any{"fen": startFEN}, "", "notation"},
		{"side to move", `[side_to_move(obs["fen"]), side_to_move(obs["other"])]`,
			map[string]any{"fen": startFEN, "other": checkFEN}, `["white","black"]`, ""},
		{"in check", `[in_check(obs["fen"]), in_check(obs["other"]), in_check(obs["mate"])]`,
			map[string]any{"fen": startFEN, "other": checkFEN, "mate": mateFEN}, `[false,true,true]`, ""},
		{"parse san", `parse_move(obs["fen"], "Nf3")`, map[string]any{"fen": startFEN}, `"g1f3"`, ""},
		{"parse uci", `parse_move(obs["fen"], "e2e4")`, map[string]any{"fen": startFEN}, `"e2e4"`, ""},
		{"parse keyword args", `parse_move(text="c6", fen=obs["fen"])`, map[string]any{"fen": checkFEN}, `"c7c6"`, ""},
		{"parse illegal is None", `parse_move(obs["fen"], "e2e5")`, map[string]any{"fen": startFEN}, `null`, ""},
		{"parse prose is None", `parse_move(obs["fen"], "I play the knight")`, map[string]any{"fen": startFEN}, `null`, ""},
		{"parse overlong is None", `parse_move(obs["fen"], "e4" * 200)`, map[string]any{"fen": startFEN}, `null`, ""},
		{"bad fen fails", `side_to_move("not a fen")`, nil, "", "FEN"},
		{"overlong fen fails", `side_to_move("8" * 300)`, nil, "", "limit"},
		{"flip not bool", `board_ascii(obs["fen"], 1)`, map[string]any{"fen": startFEN}, "", "flip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := evalHelper(t, tt.expr, tt.obs)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, harness.ErrRuntime) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %s, %v; want a runtime error mentioning %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestContractBoardASCII(t *testing.T) {
	for _, flip := range []bool{false, true} {
		p, err := NewPosition(checkFEN)
		if err != nil {
			t.Fatal(err)
		}
		want := p.ASCII(flip)
		src := "def format_observation(obs):\n    return board_ascii(obs[\"fen\"], obs[\"flip\"])\n"
		h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: Contract()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Call(context.Background(), "format_observation", map[string]any{"fen": checkFEN, "flip": flip})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("flip %v: got\n%s\nwant\n%s", flip, got, want)
		}
	}
}

func TestContractConstants(t *testing.T) {
	tests := []struct {
		name, src string
		wantErr   string
	}{
		{"defaults", "", ""},
		{"set", "BOARD_FORMAT = \"ascii\"\nSHOW_LEGAL_MOVES = True\nMOVE_FORMAT = \"san\"\nMAX_TURNS = 12\n", ""},
		{"bad board format", "BOARD_FORMAT = \"pgn\"\n", "BOARD_FORMAT"},
		{"bad move format type", "MOVE_FORMAT = 1\n", "MOVE_FORMAT"},
		{"show legal moves not bool", "SHOW_LEGAL_MOVES = \"yes\"\n", "SHOW_LEGAL_MOVES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := harness.Load("h.star", []byte(tt.src), harness.Options{Contract: Contract()})
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, harness.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.src == "" && (h.Int("MAX_TURNS") != 9 || h.String("BOARD_FORMAT") != "both" || h.Bool("SHOW_LEGAL_MOVES")) {
				t.Errorf("defaults: %v", h.Constants())
			}
		})
	}
}
