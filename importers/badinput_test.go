package importers

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/whalerun/whale/schemas"
)

var knownDomains = []string{"chess", "demo", "math", "searchqa"}

// Bytes that are not UTF-8 never reach a Parquet STRING column: the import
// stops at the line (and byte) or row that holds them.
func TestInvalidUTF8(t *testing.T) {
	ctx := context.Background()
	var got []schemas.Task

	jsonl := "{\"question\": \"ok\", \"answer\": \"1\"}\n  {\"question\": \"caf\xe9?\", \"answer\": \"1\"}\n"
	err := JSONL(ctx, strings.NewReader(jsonl), "t.jsonl", Options{Domain: "math"}, collect(t, &got))
	wantErr(t, err, "t.jsonl:2:20: invalid UTF-8: byte 0xe9 at byte offset 19 of the line", "iconv")

	// Also in a field that would go to meta untouched.
	jsonl = "{\"question\": \"q\", \"answer\": \"1\", \"note\": \"\xff\"}\n"
	err = JSONL(ctx, strings.NewReader(jsonl), "t.jsonl", Options{Domain: "math"}, collect(t, &got))
	wantErr(t, err, "t.jsonl:1:", "byte 0xff")

	csv := "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags\n" +
		"00sHx,q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17,e8d7 a2e6 d7d8 f7f8,1760,80,83,72,mate mateIn2 middlegame short,https://lichess.org/yyznGmXs/black#34,Italian_Game Italian\xc0_Game_Classical_Variation\n"
	err = LichessCSV(ctx, strings.NewReader(csv), "p.csv", Options{}, collect(t, &got))
	wantErr(t, err, "p.csv:2:", "column OpeningTags: invalid UTF-8: byte 0xc0 at byte offset 20 of the field")

	// A Parquet file written by another tool may hold anything.
	str := arrow.BinaryTypes.String
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "data_source", Type: str, Nullable: true},
		{Name: "prompt", Type: str, Nullable: true},
		{Name: "reward_model", Type: arrow.StructOf(arrow.Field{Name: "ground_truth", Type: str, Nullable: true}), Nullable: true},
	}, nil)
	for _, tc := range []struct {
		name        string
		prompt, ans string
		wants       []string
	}{
		{"question", "What is 1+\xff?", "2", []string{"bad.parquet: row 1: column prompt[0].content: invalid UTF-8: byte 0xff at byte offset 10 of the value"}},
		{"answer", "q", "\xfe", []string{"bad.parquet: row 1: column reward_model.ground_truth: invalid UTF-8: byte 0xfe at byte offset 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
			defer b.Release()
			for _, row := range [][2]string{{"What is 1+1?", "2"}, {tc.prompt, tc.ans}} {
				b.Field(0).(*array.StringBuilder).Append("gsm8k")
				b.Field(1).(*array.StringBuilder).Append(row[0])
				rm := b.Field(2).(*array.StructBuilder)
				rm.Append(true)
				rm.FieldBuilder(0).(*array.StringBuilder).Append(row[1])
			}
			rec := b.NewRecordBatch()
			defer rec.Release()
			var buf bytes.Buffer
			w, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = importVerl(buf.Bytes(), "bad.parquet", Options{})
			wantErr(t, err, tc.wants...)
		})
	}
}

// With Options.Domains set, a domain outside it stops the import, wherever
// it came from.
func TestUnknownDomain(t *testing.T) {
	ctx := context.Background()
	var got []schemas.Task
	opts := Options{Domains: knownDomains}

	jsonl := "{\"question\": \"q\", \"answer\": \"1\", \"domain\": \"math\"}\n{\"question\": \"q\", \"answer\": \"1\", \"domain\": \"nosuchdomain\"}\n"
	err := JSONL(ctx, strings.NewReader(jsonl), "t.jsonl", opts, collect(t, &got))
	wantErr(t, err, `t.jsonl:2: field "domain": unknown domain "nosuchdomain": the known domains are chess, demo, math, searchqa`)

	o := opts
	o.Domain = "nosuchdomain"
	err = JSONL(ctx, strings.NewReader("{\"question\": \"q\", \"answer\": \"1\"}\n"), "t.jsonl", o, collect(t, &got))
	wantErr(t, err, `t.jsonl:1: the import's domain: unknown domain "nosuchdomain"`)

	o.Domain = "poker"
	data := writeParquet(t, dapoSchema, dapoRows, 10)
	_, err = importVerl(data, "train.parquet", o)
	wantErr(t, err, `train.parquet: row 0: the import's domain: unknown domain "poker"`)

	// Without the list any domain goes, as before.
	got = nil
	if err := JSONL(ctx, strings.NewReader(jsonl), "t.jsonl", Options{}, collect(t, &got)); err != nil || len(got) != 2 {
		t.Errorf("no list: %d tasks, %v", len(got), err)
	}
}
