package importers

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// TestJSONLLineRoundTrip: JSONL reads back what JSONLLine writes.
func TestJSONLLineRoundTrip(t *testing.T) {
	want := []schemas.Task{
		{ID: "a-1", Domain: "searchqa", Split: "test", Question: "Where is the home of Fopa?", Answers: []string{"Disburg"}, Meta: `{"entity":"Fopa","relation":"home"}`},
		{ID: "b-2", Domain: "demo", Split: "train", Question: "What is 7 * 8?", Answers: []string{"56", "fifty-six"}, Meta: `{}`},
	}
	var buf bytes.Buffer
	for _, task := range want {
		line, err := JSONLLine(task)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
	}
	var got []schemas.Task
	if err := JSONL(context.Background(), &buf, "tasks.jsonl", Options{}, func(task schemas.Task) error {
		got = append(got, task)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v\nwant %+v", got, want)
	}
}
