package analysis

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Output formats.
const (
	FormatTable = "table"
	FormatCSV   = "csv"
	FormatJSON  = "json"
)

// Formats lists the output formats Write knows.
var Formats = []string{FormatTable, FormatCSV, FormatJSON}

// metricColumns name the scores in CSV headers and JSON keys, in the order
// of Group's fields.
var metricColumns = []string{"episodes", "tasks", "k_min", "k_max", "mean_at_k", "pass_at_k", "accuracy",
	"mean_turns", "mean_prompt_tokens", "mean_completion_tokens", "failed", "failure_rate"}

// Columns returns the CSV header of r: the group columns, then the scores.
func (r Result) Columns() []string { return append(slices.Clone(r.By), metricColumns...) }

// values renders g's scores in full precision, in metricColumns order.
func (g Group) values() []string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	i := strconv.Itoa
	return []string{i(g.Episodes), i(g.Tasks), i(g.KMin), i(g.KMax), f(g.MeanAtK), f(g.PassAtK), f(g.Accuracy),
		f(g.MeanTurns), f(g.MeanPromptTokens), f(g.MeanCompletionTokens), i(g.Failed), f(g.FailureRate)}
}

// Write renders r in format: a text table for people, CSV or JSON for
// programs. The table shortens harness ids and rounds numbers and prints
// the notes under it; CSV has no room for notes (see Result.Notes).
func (r Result) Write(w io.Writer, format string) error {
	switch format {
	case FormatTable:
		return r.writeTable(w)
	case FormatCSV:
		return r.writeCSV(w)
	case FormatJSON:
		return r.writeJSON(w)
	}
	return fmt.Errorf("unknown format %q (have %s)", format, strings.Join(Formats, ", "))
}

func (r Result) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(r.Columns()); err != nil {
		return err
	}
	for _, g := range r.Groups {
		if err := cw.Write(append(slices.Clone(g.Key), g.values()...)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func (r Result) writeJSON(w io.Writer) error {
	data, err := r.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// MarshalJSON encodes r as one object whose groups are flat objects keyed
// by the CSV header, in its order, so that jq or pandas.json_normalize
// need no knowledge of the grouping. It is what --format json prints.
func (r Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	field := func(first bool, name string, v any) error {
		if !first {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			// JSON has no NaN: a reward column with one (a verifier's
			// bug) shows as null rather than failing the whole output.
			b.WriteString("null")
			return nil
		}
		data, err := json.Marshal(v)
		b.Write(data)
		return err
	}
	notes, by := r.Notes, r.By
	if notes == nil {
		notes = []string{}
	}
	if by == nil {
		by = []string{}
	}
	b.WriteByte('{')
	for i, kv := range []struct {
		name string
		v    any
	}{{"by", by}, {"k", r.K}, {"rows", r.Rows}, {"files", r.Files}, {"notes", notes}} {
		if err := field(i == 0, kv.name, kv.v); err != nil {
			return nil, err
		}
	}
	b.WriteString(`,"headlines":[`)
	for i, h := range r.Headlines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  {")
		if err := field(true, "run", h.Run); err != nil {
			return nil, err
		}
		if err := field(false, "tests", h.Tests); err != nil {
			return nil, err
		}
		for _, t := range []struct {
			name  string
			score TestScore
		}{{"final", h.Final}, {"peak", h.Peak}} {
			b.WriteString(`,"` + t.name + `":{`)
			sc := t.score
			for j, kv := range []struct {
				name string
				v    any
			}{{"position", sc.Position}, {"round", sc.Round}, {"section", sc.Section}, {"stage", sc.Stage},
				{"mean_at_k", sc.MeanAtK}, {"tasks", sc.Tasks}, {"episodes", sc.Episodes}, {"k_min", sc.KMin}, {"k_max", sc.KMax}} {
				if err := field(j == 0, kv.name, kv.v); err != nil {
					return nil, err
				}
			}
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	if len(r.Headlines) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(`],"groups":[`)
	for gi, g := range r.Groups {
		if gi > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  {")
		for j, d := range r.By {
			if err := field(j == 0, d, g.Key[j]); err != nil {
				return nil, err
			}
		}
		for j, v := range []any{g.Episodes, g.Tasks, g.KMin, g.KMax, g.MeanAtK, g.PassAtK, g.Accuracy,
			g.MeanTurns, g.MeanPromptTokens, g.MeanCompletionTokens, g.Failed, g.FailureRate} {
			if err := field(j == 0 && len(r.By) == 0, metricColumns[j], v); err != nil {
				return nil, err
			}
		}
		b.WriteByte('}')
	}
	if len(r.Groups) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// ShortHarness shortens a harness id ("sha256:<64 hex>") to its first 12
// hex digits for tables, as git shortens commits.
func ShortHarness(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (r Result) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var head []string
	for _, d := range r.By {
		head = append(head, strings.ToUpper(strings.TrimSuffix(d, "_id")))
	}
	head = append(head, "EPISODES", "TASKS", "K", "MEAN@K", "PASS@K", "ACC", "TURNS", "PROMPT_TOK", "COMPL_TOK", "FAILED", "FAIL%")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range r.Groups {
		var cells []string
		for j, d := range r.By {
			v := g.Key[j]
			if d == DimHarness {
				v = ShortHarness(v)
			}
			if v == "" {
				v = "-"
			}
			cells = append(cells, v)
		}
		k := strconv.Itoa(g.KMin)
		if g.KMax != g.KMin {
			k += "-" + strconv.Itoa(g.KMax)
		}
		cells = append(cells, strconv.Itoa(g.Episodes), strconv.Itoa(g.Tasks), k,
			fmt.Sprintf("%.3f", g.MeanAtK), fmt.Sprintf("%.3f", g.PassAtK), fmt.Sprintf("%.3f", g.Accuracy),
			fmt.Sprintf("%.2f", g.MeanTurns), fmt.Sprintf("%.1f", g.MeanPromptTokens), fmt.Sprintf("%.1f", g.MeanCompletionTokens),
			strconv.Itoa(g.Failed), fmt.Sprintf("%.1f", 100*g.FailureRate))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Groups) == 0 {
		if _, err := fmt.Fprintln(w, "(no rollouts)"); err != nil {
			return err
		}
	}
	if err := r.writeHeadlines(w); err != nil {
		return err
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintln(w, "note:", n); err != nil {
			return err
		}
	}
	return nil
}

// writeHeadlines prints each run's final and peak test mean@k under the
// table: the paper reports the best mean@k over a run's tests.
func (r Result) writeHeadlines(w io.Writer) error {
	if len(r.Headlines) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "\ntest mean@k per run: the final test and the peak over all its tests"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tTESTS\tFINAL\tFINAL_AT\tPEAK\tPEAK_AT")
	for _, h := range r.Headlines {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%.3f\t%s\n", h.Run, h.Tests, h.Final.MeanAtK, h.Final.where(), h.Peak.MeanAtK, h.Peak.where())
	}
	return tw.Flush()
}
