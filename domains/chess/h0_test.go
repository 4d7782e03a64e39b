package chess

import (
	"context"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestHarnessTable: every built-in harness loads under the contract
// without warnings, and "h0" is the Baseline.
func TestHarnessTable(t *testing.T) {
	hs := Harnesses()
	if len(hs) != 2 || string(hs["h0"]) != string(NewDomain().Baseline()) || hs["h0-compact"] == nil {
		t.Fatalf("Harnesses() has %d entries; want h0 (the Baseline) and h0-compact", len(hs))
	}
	for name, src := range hs {
		warnings, err := harness.Check(name+".star", src, harness.Options{Contract: Contract()})
		if err != nil || len(warnings) > 0 {
			t.Errorf("%s: err %v, warnings %v", name, err, warnings)
		}
	}
}

// TestPaperH0Parse: one UCI move, from tags, else brackets, else a bare
// word; two different moves at one level are a format error.
func TestPaperH0Parse(t *testing.T) {
	h := loadHarness(t, string(Harnesses()["h0"]))
	if h.Int("MAX_TURNS") != 9 || h.Int("FORMAT_RETRIES") != 1 || h.Int("ILLEGAL_RETRIES") != 1 || len(h.Tools()) != 0 {
		t.Errorf("budgets %d/%d/%d, %d tools; want 9/1/1 and none",
			h.Int("MAX_TURNS"), h.Int("FORMAT_RETRIES"), h.Int("ILLEGAL_RETRIES"), len(h.Tools()))
	}
	tests := []struct {
		reply string
		want  harness.Action
	}{
		{"The rook covers it. <move>f8d8</move>", move("f8d8")},
		{"<MOVE> F8D8 </MOVE>", move("f8d8")},
		{"Both e2e4 and d2d4 look bad; <move>f8d8</move>", move("f8d8")},
		{"I pick [e7e8q].", move("e7e8q")},
		{"f8d8 it is, f8d8.", move("f8d8")},
		{"<move>e2e4</move> no, <move>f8d8</move>", harness.Action{Kind: "invalid"}},
		{"e2e4 or d2d4", harness.Action{Kind: "invalid"}},
		{"<move>Rd8</move>", harness.Action{Kind: "invalid"}},
		{"I resign.", harness.Action{Kind: "invalid"}},
	}
	for _, tt := range tests {
		v, err := h.Call(context.Background(), "parse_action", tt.reply, map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := harness.ActionFrom(v)
		if err != nil {
			t.Fatal(err)
		}
		if a.Kind != tt.want.Kind || a.Move != tt.want.Move {
			t.Errorf("parse_action(%q) = %s %q, want %s %q", tt.reply, a.Kind, a.Move, tt.want.Kind, tt.want.Move)
		}
	}
}

// TestEpisodePaperH0 plays the paper's chess h0 against a scripted
// OpenAI-compatible model: no tools are offered, every observation lists
// the legal moves, the retry budgets hold, and the reward is 1 only when
// the whole line is played.
func TestEpisodePaperH0(t *testing.T) {
	tests := []struct {
		name      string
		puzzle    string
		replies   []string
		finish    string
		reward    float64
		answer    string
		turns     int
		inContext []string
	}{
		{"solved in three moves", "00008", []string{"<move>e6e7</move>", "The knight: [b3c1]", "h6c1"},
			episode.FinishAnswer, 1, "e6e7 b3c1 h6c1", 3, []string{"Opponent's last move: b1c1", "Your moves so far: e6e7, b3c1", "- [h6c1] SAN=Qxc1"}},
		{"an illegal move, then right", "0000D", []string{"<move>e2e4</move>", "<move>f8d8</move>", "<move>f6d8</move>"},
			episode.FinishAnswer, 1, "f8d8 f6d8", 3, []string{"not legal in this position", "Opponent's last move: d6d8"}},
		{"two illegal moves use up the retry", "0000D", []string{"<move>e2e4</move>", "<move>a1a2</move>"},
			episode.FinishIllegal, 0, "", 2, []string{"not legal in this position"}},
		{"two unreadable replies use up the retry", "0000D", []string{"The rook, I think.", "e2e4 or f8d8"},
			episode.FinishFormat, 0, "", 2, []string{"could not read exactly one UCI move"}},
		{"a right move, then a wrong one: no reward", "0000D", []string{"<move>f8d8</move>", "<move>b6d8</move>"},
			episode.FinishAnswer, 0, "f8d8 b6d8", 2, nil},
		{"a wrong first move", "0000D", []string{"<move>g7g6</move>"}, episode.FinishAnswer, 0, "g7g6", 1, nil},
	}
	d := NewDomain()
	h, err := harness.Load("h0.star", d.Baseline(), harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replies := make([]modeltest.Reply, len(tt.replies))
			for i, r := range tt.replies {
				replies[i] = modeltest.Reply{Content: r}
			}
			srv := modeltest.NewServer(t, modeltest.Script(replies...))
			m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
			if err != nil {
				t.Fatal(err)
			}
			res := episode.Run(context.Background(), d, h, m, taskByID(t, tt.puzzle), episode.Config{Seed: 7})
			if res.Error != "" || res.FinishReason != tt.finish || res.Reward != tt.reward || res.Answer != tt.answer || res.Turns != tt.turns {
				t.Fatalf("Run = finish %q reward %v answer %q turns %d error %q, want %q %v %q %d",
					res.FinishReason, res.Reward, res.Answer, res.Turns, res.Error, tt.finish, tt.reward, tt.answer, tt.turns)
			}
			reqs := srv.Requests()
			if len(reqs) != tt.turns {
				t.Fatalf("%d model calls, want %d", len(reqs), tt.turns)
			}
			if _, ok := reqs[0].Body["tools"]; ok {
				t.Errorf("chess h0 offers tools: %s", reqs[0].Raw)
			}
			first := reqs[0].Messages
			if len(first) != 2 || first[0].Role != "system" || !strings.Contains(first[1].Content, "Legal moves:\n- [") || !strings.Contains(first[1].Content, "FEN: ") {
				t.Fatalf("first call's messages %+v", first)
			}
			var last strings.Builder
			for _, msg := range reqs[len(reqs)-1].Messages {
				last.WriteString(msg.Content + "\n")
			}
			for _, w := range tt.inContext {
				if !strings.Contains(last.String(), w) {
					t.Errorf("the last call's context lacks %q:\n%s", w, last.String())
				}
			}
		})
	}
}

// The paper's h0 keeps the presentation constants working: a proposer
// that sets them changes what the model sees.
func TestPaperH0PresentationKnobs(t *testing.T) {
	src := string(Harnesses()["h0"])
	set := func(name, value string) string {
		for _, line := range strings.Split(src, "\n") {
			if strings.HasPrefix(line, name+" = ") {
				return strings.Replace(src, line, name+" = "+value, 1)
			}
		}
		t.Fatalf("h0 sets no %s", name)
		return ""
	}
	tests := []struct {
		name, src   string
		want, avoid []string
	}{
		{"defaults", src, []string{"FEN: 5rk1/", "Board:\n8 . . . . . r k .", "Legal moves:\n- [", "] SAN="}, nil},
		{"fen only", set("BOARD_FORMAT", `"fen"`), []string{"FEN: 5rk1/"}, []string{"Board:"}},
		{"ascii only", set("BOARD_FORMAT", `"ascii"`), []string{"Board:\n8 . . . . . r k ."}, []string{"FEN:"}},
		{"no legal moves", set("SHOW_LEGAL_MOVES", "False"), []string{"FEN: "}, []string{"Legal moves", "SAN="}},
		{"legal moves in SAN", set("MOVE_FORMAT", `"san"`), []string{"Legal moves:\n- ", "Rd8 [f8d8]"}, []string{"SAN="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := loadHarness(t, tt.src)
			_, obs := newEnv(t, taskByID(t, "0000D"), h)
			text, err := h.Call(context.Background(), "format_observation", obs)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(text.(string), w) {
					t.Errorf("lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tt.avoid {
				if strings.Contains(text.(string), w) {
					t.Errorf("shows %q:\n%s", w, text)
				}
			}
		})
	}
}
