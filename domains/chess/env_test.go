package chess

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

func loadHarness(t *testing.T, src string) *harness.Harness {
	t.Helper()
	h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: Contract()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func taskByID(t *testing.T, id string) schemas.Task {
	t.Helper()
	for _, task := range loadTasks(t) {
		if task.ID == id {
			return task
		}
	}
	t.Fatalf("no puzzle %s in the testdata", id)
	return schemas.Task{}
}

// Hand-made puzzles, given as FEN and line the way FromTask reads a task
// without Lichess meta.
var (
	// After ...Ra2, both Rd8# and Re8# mate.
	twoMates = schemas.Task{ID: "two-mates", Domain: "chess", Question: "r5k1/5ppp/8/8/8/8/5PPP/3RR1K1 b - - 0 30", Answers: []string{"a8a2 d1d8"}}
	// After ...Ra7, white castles short.
	castles = schemas.Task{ID: "castles", Domain: "chess", Question: "r3k3/8/8/8/8/8/8/4K2R b K - 0 1", Answers: []string{"a8a7 e1g1"}}
)

func newEnv(t *testing.T, task schemas.Task, h *harness.Harness) (episode.Env, map[string]any) {
	t.Helper()
	env, err := NewDomain().NewEnv(context.Background(), task, h)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := env.Reset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return env, obs
}

func move(text string) harness.Action { return harness.Action{Kind: "move", Move: text} }

// TestEnvPlays plays whole episodes: each step is a move text and what
// the environment must say to it.
func TestEnvPlays(t *testing.T) {
	type want struct {
		illegal  string  // a substring of Illegal; "" when legal
		done     bool    // the episode ends
		reward   float64 // when done
		lastMove string  // the opponent's reply in the next observation, when not done
	}
	type turn struct {
		action harness.Action
		want   want
	}
	tests := []struct {
		name   string
		task   schemas.Task
		turns  []turn
		answer string // Outcome.Answer at the end
	}{
		{"multi-move in UCI", taskByID(t, "00008"), []turn{
			{move("e6e7"), want{lastMove: "b2b1"}},
			{move("b3c1"), want{lastMove: "b1c1"}},
			{move("h6c1"), want{done: true, reward: 1}},
		}, "e6e7 b3c1 h6c1"},
		{"multi-move in SAN with annotations", taskByID(t, "0000D"), []turn{
			{move("Rd8"), want{lastMove: "d6d8"}},
			{move("Bxd8!"), want{done: true, reward: 1}},
		}, "f8d8 f6d8"},
		{"answer action read as a move", taskByID(t, "0000D"), []turn{
			{harness.Action{Kind: "answer", Answer: " f8d8 "}, want{lastMove: "d6d8"}},
			{harness.Action{Kind: "answer", Answer: "Bxd8"}, want{done: true, reward: 1}},
		}, "f8d8 f6d8"},
		{"wrong second move", taskByID(t, "00008"), []turn{
			{move("Re7"), want{lastMove: "b2b1"}},
			{move("Kh2"), want{illegal: "in check"}},
			{move("Qc1"), want{done: true, reward: 0}},
		}, "e6e7 h6c1"},
		{"illegal then unparseable then right", taskByID(t, "0000D"), []turn{
			{move("e2e4"), want{illegal: "illegal move"}},
			{move("the rook"), want{illegal: "not a move"}},
			{harness.Action{Kind: "tool", Tool: "engine", Input: "go"}, want{illegal: "no tools in chess"}},
			{move("f8d8"), want{lastMove: "d6d8"}},
			{move("f6d8"), want{done: true, reward: 1}},
		}, "f8d8 f6d8"},
		{"mate in one, the line's mate", twoMates, []turn{{move("Rd8#"), want{done: true, reward: 1}}}, "d1d8"},
		{"mate in one, another mate", twoMates, []turn{{move("e1e8"), want{done: true, reward: 1}}}, "e1e8"},
		{"mate in one, no mate", twoMates, []turn{{move("Rd7"), want{done: true, reward: 0}}}, "d1d7"},
		{"ambiguous SAN", twoMates, []turn{
			{move("R8"), want{illegal: "not a move"}},
			{move("Rd2"), want{done: true, reward: 0}},
		}, "d1d2"},
		{"castling in SAN", castles, []turn{{move("O-O"), want{done: true, reward: 1}}}, "e1g1"},
		{"castling with zeros", castles, []turn{{move("0-0"), want{done: true, reward: 1}}}, "e1g1"},
		{"castling king onto rook", castles, []turn{{move("e1h1"), want{done: true, reward: 1}}}, "e1g1"},
		{"castling as a king move", castles, []turn{{move("Kg1"), want{done: true, reward: 1}}}, "e1g1"},
		{"long castling is illegal here", castles, []turn{{move("O-O-O"), want{illegal: "illegal"}}}, ""},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, obs := newEnv(t, tt.task, nil)
			before := obs["fen"]
			var played int
			for i, tn := range tt.turns {
				st, err := env.Step(ctx, tn.action)
				if err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
				w := tn.want
				switch {
				case w.illegal != "":
					if !strings.Contains(st.Illegal, w.illegal) || st.Done || st.Observation != nil {
						t.Fatalf("turn %d: Step = %+v, want Illegal %q", i, st, w.illegal)
					}
				case w.done:
					if !st.Done || st.Illegal != "" || st.Outcome.Reward != w.reward || st.Outcome.Correct != (w.reward == 1) {
						t.Fatalf("turn %d: Step = %+v, want done with reward %v", i, st, w.reward)
					}
				default:
					played++
					o := st.Observation
					if st.Done || o == nil || o["last_move"] != w.lastMove || o["fen"] == before {
						t.Fatalf("turn %d: Step = %+v, want the position after the opponent's %s", i, st, w.lastMove)
					}
					if mp := o["moves_played"].([]string); len(mp) != played {
						t.Errorf("turn %d: moves_played = %v, want %d moves", i, mp, played)
					}
					before = o["fen"]
				}
			}
			if out := env.Final(ctx); out.Answer != tt.answer {
				t.Errorf("answer = %q, want %q", out.Answer, tt.answer)
			}
		})
	}
}

func TestEnvAfterTheEnd(t *testing.T) {
	env, _ := newEnv(t, twoMates, nil)
	if st, err := env.Step(context.Background(), move("Rd7")); err != nil || !st.Done {
		t.Fatalf("Step = %+v, %v", st, err)
	}
	if _, err := env.Step(context.Background(), move("Rd8")); err == nil {
		t.Error("a move after the end is not an error")
	}
	if out := env.Final(context.Background()); out.Reward != 0 || out.Answer != "d1d7" {
		t.Errorf("Final = %+v", out)
	}
}

func TestEnvObservation(t *testing.T) {
	task := taskByID(t, "0000D") // white's Qd6 first; black to move
	tests := []struct {
		name     string
		src      string
		board    bool
		legal    []string // a few of them, in the notation asked for; nil when not shown
		lastMove string
		inText   []string
		notText  []string
	}{
		{"defaults", "", true, nil, "d3d6", []string{"FEN: 5rk1/1p3ppp/pq1Q1b2/", "8 . . . . . r k .", "opponent played d3d6", "You play black"}, []string{"Legal moves"}},
		{"fen only, legal moves in SAN", "BOARD_FORMAT = \"fen\"\nSHOW_LEGAL_MOVES = True\nMOVE_FORMAT = \"san\"\n", false,
			[]string{"Rd8", "Kh8", "Bb2", "Qxf2+"}, "Qd6", []string{"FEN: ", "Legal moves: ", "Rd8", "opponent played Qd6"}, []string{"8 . . ."}},
		{"ascii only, legal moves in UCI", "BOARD_FORMAT = \"ascii\"\nSHOW_LEGAL_MOVES = True\n", true,
			[]string{"f8d8", "g8h8", "f6b2"}, "d3d6", []string{"8 . . . . . r k .", "f8d8"}, []string{"FEN:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, obs := newEnv(t, task, loadHarness(t, tt.src))
			if obs["fen"] != "5rk1/1p3ppp/pq1Q1b2/8/8/1P3N2/P4PPP/3R2K1 b - - 3 27" || obs["side_to_move"] != "black" || obs["in_check"] != false {
				t.Errorf("obs = %v", obs)
			}
			if board := obs["board"].(string); tt.board != (board != "") || (tt.board && !strings.HasPrefix(board, "8 . . . . . r k .")) {
				t.Errorf("board = %q, want shown %v", board, tt.board)
			}
			legal, shown := obs["legal_moves"].([]string)
			if shown != (tt.legal != nil) {
				t.Errorf("legal_moves = %v, want shown %v", obs["legal_moves"], tt.legal != nil)
			}
			for _, m := range tt.legal {
				if !slices.Contains(legal, m) {
					t.Errorf("legal_moves %v lack %s", legal, m)
				}
			}
			if obs["last_move"] != tt.lastMove || len(obs["moves_played"].([]string)) != 0 {
				t.Errorf("last_move %v, moves_played %v", obs["last_move"], obs["moves_played"])
			}
			q := obs["question"].(string)
			for _, w := range tt.inText {
				if !strings.Contains(q, w) {
					t.Errorf("question lacks %q:\n%s", w, q)
				}
			}
			for _, w := range tt.notText {
				if strings.Contains(q, w) {
					t.Errorf("question has %q:\n%s", w, q)
				}
			}
		})
	}
}

func TestEnvBadTasks(t *testing.T) {
	d := NewDomain()
	for _, task := range []schemas.Task{
		{ID: "bad-fen", Domain: "chess", Question: "not a fen", Answers: []string{"e2e4 e7e5"}},
		{ID: "short-line", Domain: "chess", Question: twoMates.Question, Answers: []string{"a8a2"}},
		{ID: "other-domain", Domain: "math", Question: twoMates.Question, Answers: []string{"a8a2 d1d8"}},
	} {
		if _, err := d.NewEnv(context.Background(), task, nil); err == nil || !strings.Contains(err.Error(), task.ID) {
			t.Errorf("NewEnv(%s) err = %v, want one naming the task", task.ID, err)
		}
	}
	other, err := harness.Load("other.star", nil, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewEnv(context.Background(), twoMates, other); err == nil || !strings.Contains(err.Error(), "BOARD_FORMAT") {
		t.Errorf("NewEnv with a base-contract harness: err = %v, want one naming BOARD_FORMAT", err)
	}
}

func TestCompactHarness(t *testing.T) {
	d := NewDomain()
	if d.Name() != "chess" || d.Contract().Name != "chess" {
		t.Fatalf("Name %q, contract %q", d.Name(), d.Contract().Name)
	}
	warnings, err := harness.Check("h0.star", Harnesses()["h0-compact"], harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("h0 warnings: %v", warnings)
	}
	h := loadHarness(t, string(Harnesses()["h0-compact"]))
	if h.Int("MAX_TURNS") != 9 || h.Int("FORMAT_RETRIES") != 1 || h.Int("ILLEGAL_RETRIES") != 1 {
		t.Errorf("budgets %d/%d/%d, want 9/1/1", h.Int("MAX_TURNS"), h.Int("FORMAT_RETRIES"), h.Int("ILLEGAL_RETRIES"))
	}
	ctx := context.Background()
	_, obs := newEnv(t, taskByID(t, "0000D"), h)
	text, err := h.Call(ctx, "format_observation", obs)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"opponent played d3d6", "You play black", "FEN: " + obs["fen"].(string), obs["board"].(string)} {
		if !strings.Contains(text.(string), w) {
			t.Errorf("first message lacks %q:\n%s", w, text)
		}
	}
	tests := []struct {
		reply string
		want  harness.Action
	}{
		{"The rook covers it. <move>f8d8</move>", move("f8d8")},
		{"<move>e2e4</move> no, better <move> Rd8 </move>", move("Rd8")},
		{"Rd8", harness.Action{Kind: "invalid"}},
		{"<move></move>", harness.Action{Kind: "invalid"}},
	}
	for _, tt := range tests {
		v, err := h.Call(ctx, "parse_action", tt.reply, map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := harness.ActionFrom(v)
		if err != nil {
			t.Fatal(err)
		}
		if a.Kind != tt.want.Kind || a.Move != tt.want.Move {
			t.Errorf("parse_action(%q) = %+v, want %+v", tt.reply, a, tt.want)
		}
	}
}
