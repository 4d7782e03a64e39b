package chess

import (
	"strings"
	"testing"
)

// benchPuzzle is the longest test puzzle (4 solver moves).
var benchPuzzle = fuzzPuzzles[1]

func BenchmarkNewPuzzle(b *testing.B) {
	line := strings.Fields(benchPuzzle[1])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewPuzzle(benchPuzzle[0], line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlay is one Play call: the solver's move in SAN, its judgement
// and the opponent's reply. Puzzles are rebuilt off the clock.
func BenchmarkPlay(b *testing.B) {
	line := strings.Fields(benchPuzzle[1])
	b.ReportAllocs()
	var z *Puzzle
	var sans []string
	for i := 0; b.Loop(); i++ {
		step := i % (len(line) / 2)
		if step == 0 {
			b.StopTimer()
			var err error
			if z, err = NewPuzzle(benchPuzzle[0], line); err != nil {
				b.Fatal(err)
			}
			if sans == nil {
				sans = solutionSAN(b, line)
			}
			b.StartTimer()
		}
		if out, err := z.Play(sans[step]); err != nil || !out.Correct {
			b.Fatalf("Play(%s): %+v %v", sans[step], out, err)
		}
	}
}

func solutionSAN(b *testing.B, line []string) []string {
	b.Helper()
	z, err := NewPuzzle(benchPuzzle[0], line)
	if err != nil {
		b.Fatal(err)
	}
	var sans []string
	for i := 1; i < len(line); i += 2 {
		m, err := z.Position().Move(line[i])
		if err != nil {
			b.Fatal(err)
		}
		sans = append(sans, m.SAN)
		if _, err := z.Play(line[i]); err != nil {
			b.Fatal(err)
		}
	}
	return sans
}

func BenchmarkParseMove(b *testing.B) {
	p, err := NewPosition(kiwipete)
	if err != nil {
		b.Fatal(err)
	}
	for _, text := range []string{"e2a6", "Bxa6", "O-O-O", "hello"} {
		b.Run(text, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.parse(text)
			}
		})
	}
}

// BenchmarkLegalMovesSAN: "fresh" is the first call on a position (SAN
// encoding of every move, with check and mate detection); "cached" every
// later call.
func BenchmarkLegalMovesSAN(b *testing.B) {
	p, err := NewPosition(kiwipete)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.sanList()
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.LegalMovesSAN()
		}
	})
}

func BenchmarkLegalMovesUCI(b *testing.B) {
	p, err := NewPosition(kiwipete)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.LegalMovesUCI()
	}
}

func BenchmarkASCII(b *testing.B) {
	p, err := NewPosition(kiwipete)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.ASCII(true)
	}
}
