package importers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func importPuzzles(t *testing.T, path string, opts Options) []schemas.Task {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []schemas.Task
	if err := LichessCSV(context.Background(), f, path, opts, collect(t, &got)); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLichessLayouts(t *testing.T) {
	wantIDs := []string{"00sHx", "00sJ9", "0a1Bc", "0b7Pq", "0c4Sm"}
	for _, tt := range []struct {
		file     string
		openings bool
	}{
		{"testdata/puzzles.csv", true},
		{"testdata/puzzles_old.csv", false},
		{"testdata/puzzles_noheader.csv", false},
	} {
		t.Run(tt.file, func(t *testing.T) {
			got := importPuzzles(t, tt.file, Options{Split: "train"})
			var ids []string
			for _, task := range got {
				ids = append(ids, task.ID)
				if task.Domain != "chess" || task.Split != "train" {
					t.Errorf("%s: domain %q split %q", task.ID, task.Domain, task.Split)
				}
			}
			if !reflect.DeepEqual(ids, wantIDs) {
				t.Fatalf("ids %v, want %v", ids, wantIDs)
			}
			first := got[0]
			if first.Question != "q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17" ||
				!reflect.DeepEqual(first.Answers, []string{"e8d7 a2e6 d7d8 f7f8"}) {
				t.Errorf("first puzzle: %+v", first)
			}
			var m LichessMeta
			if err := json.Unmarshal([]byte(first.Meta), &m); err != nil {
				t.Fatal(err)
			}
			want := LichessMeta{
				FEN:    first.Question,
				Moves:  []string{"e8d7", "a2e6", "d7d8", "f7f8"},
				Rating: 1760, RatingDeviation: 80, Popularity: 83, NbPlays: 72,
				Themes:      []string{"mate", "mateIn2", "middlegame", "short"},
				GameURL:     "https://lichess.org/yyznGmXs/black#34",
				OpeningTags: []string{},
			}
			if tt.openings {
				want.OpeningTags = []string{"Italian_Game", "Italian_Game_Classical_Variation"}
			}
			if !reflect.DeepEqual(m, want) {
				t.Errorf("meta\n got %+v\nwant %+v", m, want)
			}
			var neg LichessMeta
			_ = json.Unmarshal([]byte(got[3].Meta), &neg)
			if neg.Popularity != -12 || got[3].Answers[0] != "g2f3 b7b8q" {
				t.Errorf("promotion puzzle: %+v", neg)
			}
			// Every meta key the brief names is present, lists as lists.
			raw := metaOf(t, got[2])
			for _, k := range []string{"fen", "moves", "rating", "rating_deviation", "popularity", "nb_plays", "themes", "game_url", "opening_tags"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("meta lacks %q: %s", k, got[2].Meta)
				}
			}
			if _, isList := raw["opening_tags"].([]any); !isList {
				t.Errorf("opening_tags is not a list: %s", got[2].Meta)
			}
		})
	}
}

func TestLichessBadInput(t *testing.T) {
	header := strings.Join(lichessColumns, ",") + "\n"
	good := "00sHx,q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17,e8d7 a2e6 d7d8 f7f8,1760,80,83,72,mate short,https://lichess.org/yyznGmXs/black#34,Italian_Game\n"
	row := func(col int, value string) string {
		f := strings.Split(strings.TrimSuffix(good, "\n"), ",")
		f[col] = value
		return strings.Join(f, ",") + "\n"
	}
	tests := []struct {
		name  string
		input string
		opts  Options
		wants []string
	}{
		{"wrong header", strings.Replace(header, "Moves", "Move", 1) + good, Options{},
			[]string{`puzzles.csv:1: unexpected header: column 3 is "Move", expected "Moves"`}},
		{"header column count", "PuzzleId,FEN,Moves,Rating\n" + good, Options{},
			[]string{`puzzles.csv:1: unexpected header: found 4 columns ("PuzzleId,FEN,Moves,Rating"), expected PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl with optional OpeningTags`}},
		{"not a puzzle file", "id,question,answer\n1,q,a\n", Options{},
			[]string{`puzzles.csv:1: unexpected header: found 3 columns`}},
		{"rating not a number", header + good + row(colRating, "abc"), Options{},
			[]string{`puzzles.csv:3:`, `column Rating: expected an integer, found "abc"`}},
		{"nb plays not a number", header + good + good + row(colNbPlays, "1.5"), Options{},
			[]string{`puzzles.csv:4:`, `column NbPlays: expected an integer, found "1.5"`}},
		{"FEN fields", header + row(colFEN, "8/8/8/8/8/8/8/8 w - -"), Options{},
			[]string{`puzzles.csv:2:`, `column FEN: expected a FEN of 6 space-separated fields, found 4`}},
		{"FEN rank", header + row(colFEN, "8/8/8/8/8/8/8/7 w - - 0 1"), Options{},
			[]string{`column FEN: FEN rank 1 has 7 squares, expected 8`}},
		{"one move", header + row(colMoves, "e8d7"), Options{},
			[]string{`puzzles.csv:2:`, `column Moves: expected at least 2 UCI moves (the opponent's move, then the solution), found 1`}},
		{"bad UCI", header + row(colMoves, "e8d7 a2e9"), Options{},
			[]string{`column Moves: move 2 "a2e9" is not a UCI move`}},
		{"bad promotion", header + row(colMoves, "e8d7 a7a8k"), Options{},
			[]string{`column Moves: move 2 "a7a8k" is not a UCI move`}},
		{"empty id", header + row(colID, ""), Options{},
			[]string{`puzzles.csv:2:1: column PuzzleId: is empty`}},
		{"column count", header + good + "x,y\n", Options{},
			[]string{`puzzles.csv:3: expected 10 columns as in the first line, found 2`}},
		{"bad quoting", header + good + `a,"b"c,d` + "\n", Options{},
			[]string{`puzzles.csv:3:`, `invalid CSV`}},
		{"wrong domain", header + good, Options{Domain: "math"},
			[]string{`Lichess puzzles are domain chess, not "math"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := LichessCSV(context.Background(), strings.NewReader(tt.input), "puzzles.csv", tt.opts, func(schemas.Task) error { return nil })
			if tt.name == "wrong domain" {
				if err == nil || !strings.Contains(err.Error(), tt.wants[0]) {
					t.Errorf("err = %v", err)
				}
				return
			}
			wantErr(t, err, tt.wants...)
		})
	}
}

func TestLichessCallbackError(t *testing.T) {
	stop := errors.New("stop")
	f, _ := os.Open("testdata/puzzles.csv")
	defer f.Close()
	err := LichessCSV(context.Background(), f, "p.csv", Options{}, func(task schemas.Task) error {
		if task.ID == "0a1Bc" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "p.csv:4: task not accepted") {
		t.Errorf("err = %v", err)
	}
}

// puzzleSource streams n generated puzzle rows.
type puzzleSource struct {
	n, i int
	buf  bytes.Buffer
}

func (s *puzzleSource) Read(p []byte) (int, error) {
	if s.i == 0 && s.buf.Len() == 0 {
		s.buf.WriteString(strings.Join(lichessColumns, ",") + "\n")
	}
	for s.buf.Len() < len(p) && s.i < s.n {
		fmt.Fprintf(&s.buf, "p%07d,r5k1/5ppp/8/8/8/8/5PPP/3R2K1 b - - 0 30,a8a2 d1d8,1102,76,95,1840,backRankMate endgame mate mateIn1 oneMove,https://lichess.org/Qm3xT9pL/black#59,\n", s.i)
		s.i++
	}
	if s.buf.Len() == 0 {
		return 0, io.EOF
	}
	return s.buf.Read(p)
}

func TestLichessMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 300k rows; skipped in -short mode")
	}
	const rows = 300_000 // ≈ 45 MB
	var peak uint64
	var ms runtime.MemStats
	n := 0
	err := LichessCSV(context.Background(), &puzzleSource{n: rows}, "big.csv", Options{}, func(schemas.Task) error {
		if n++; n%8192 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		return nil
	})
	if err != nil || n != rows {
		t.Fatalf("err %v after %d rows", err, n)
	}
	if peak > 32<<20 {
		t.Errorf("heap reached %d MB: the importer holds the input", peak>>20)
	}
	t.Logf("peak heap %.1f MB for %d puzzles", float64(peak)/(1<<20), rows)
}

func BenchmarkLichessCSV(b *testing.B) {
	const rows = 10000
	for b.Loop() {
		if err := LichessCSV(context.Background(), &puzzleSource{n: rows}, "b.csv", Options{}, func(schemas.Task) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "tasks/s")
}

func FuzzLichessCSV(f *testing.F) {
	for _, p := range []string{"testdata/puzzles.csv", "testdata/puzzles_old.csv", "testdata/puzzles_noheader.csv"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("PuzzleId,FEN\n"))
	f.Add([]byte("a,8/8/8/8/8/8/8/8 w - - 0 1,a1a2 a2a3,1,1,1,1,,,\n"))
	f.Add([]byte("\"unterminated\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []schemas.Task
		err := LichessCSV(context.Background(), bytes.NewReader(data), "f.csv", Options{}, collect(t, &got))
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("error is %T, not *Error: %v", err, err)
			}
		}
		for _, task := range got {
			var m LichessMeta
			if err := json.Unmarshal([]byte(task.Meta), &m); err != nil || len(m.Moves) < 2 || checkFEN(task.Question) != "" {
				t.Fatalf("accepted a bad puzzle: %+v", task)
			}
		}
	})
}
