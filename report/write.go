package report

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Names of the files Write creates besides the plots.
const (
	IndexName = "index.html"
	DataName  = "report.json"
)

//go:embed page.html.tmpl
var pageSource string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"f3":      f3,
	"pct":     pct,
	"count":   count,
	"seconds": seconds,
	"when":    when,
	"color":   func(i int) template.CSS { return template.CSS("background:" + hexColor(runColor(i))) },
	"join":    strings.Join,
	"stat":    stat,
	"spread":  spread,
	"countf": func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return count(int64(math.Round(v)))
	},
}).Parse(pageSource))

// view is what the template renders.
type view struct {
	*Data
	Figures []*figure
	// Missing says which plots have nothing to show, and why.
	Missing []string
}

// RunColor is the colour index of run i: its own, or with a comparison
// its group's, as the seeds plot draws it.
func (v *view) RunColor(i int) int { return v.colorOf(i) }

// Write renders d into dir (created if needed): index.html, one PNG per
// plot and report.json. It returns the paths it wrote, index.html first.
// Each file is written to a temporary name and renamed, so a browser
// that reloads meanwhile sees the old report or the new one.
func Write(ctx context.Context, d *Data, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	v := &view{Data: d}
	add := func(f *figure, err error, missing string) error {
		if err != nil {
			return err
		}
		if f != nil {
			v.Figures = append(v.Figures, f)
		} else if missing != "" {
			v.Missing = append(v.Missing, missing)
		}
		return ctx.Err()
	}
	// Over seeds, the band figure replaces the per-run curves: it draws
	// every run's curve too, coloured by schedule.
	accuracy := accuracyFigure
	if d.Comparison != nil {
		accuracy = seedsFigure
	}
	f, err := accuracy(d)
	if err := add(f, err, missingAccuracy); err != nil {
		return nil, err
	}
	f, err = timelineFigure(d)
	if err := add(f, err, ""); err != nil {
		return nil, err
	}
	frontiers := 0
	for _, r := range d.Runs {
		f, err := frontierFigure(r)
		if err := add(f, err, ""); err != nil {
			return nil, err
		}
		if f != nil {
			frontiers++
		}
	}
	if frontiers == 0 {
		v.Missing = append(v.Missing, missingFrontier)
	}
	f, err = acceptanceFigure(d)
	if err := add(f, err, missingAcceptance); err != nil {
		return nil, err
	}

	var paths []string
	var html bytes.Buffer
	if err := page.Execute(&html, v); err != nil {
		return nil, fmt.Errorf("report: render %s: %w", IndexName, err)
	}
	if err := writeFile(dir, IndexName, html.Bytes()); err != nil {
		return nil, err
	}
	paths = append(paths, filepath.Join(dir, IndexName))
	for _, f := range v.Figures {
		if err := writeFile(dir, f.File, f.png); err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(dir, f.File))
	}
	js, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("report: encode %s: %w", DataName, err)
	}
	if err := writeFile(dir, DataName, append(js, '\n')); err != nil {
		return nil, err
	}
	return append(paths, filepath.Join(dir, DataName)), nil
}

// What the page says instead of a plot with nothing to show (the figure
// constructors return a nil figure then).
const (
	missingAccuracy   = "No run has a test evaluation yet, so there is no accuracy curve: tests run after each phase with eval.test_every_phase, else at the end of the run."
	missingFrontier   = "No run has scored a harness candidate, so there is no harness Pareto frontier to plot."
	missingAcceptance = "No run has a filtered weight step, so there is no acceptance rate to plot."
)

func writeFile(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("report: write %s: %w", filepath.Join(dir, name), err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("report: write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// Formatting for the page: a missing number is a dash.

func f3(v any) string {
	switch x := v.(type) {
	case *float64:
		if x == nil {
			return "–"
		}
		return f3(*x)
	case float64:
		if math.IsNaN(x) {
			return "–"
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return "–"
}

func pct(v any) string {
	switch x := v.(type) {
	case *float64:
		if x == nil {
			return "–"
		}
		return pct(*x)
	case float64:
		return strconv.FormatFloat(100*x, 'f', 1, 64) + "%"
	}
	return "–"
}

// count writes an integer with thousands separators.
func count(v any) string {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case *int64:
		if x == nil {
			return "–"
		}
		n = *x
	default:
		return "–"
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// seconds writes a duration the way people read it: 850ms, 42s, 3m05s, 2h14m.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

func when(v any) string {
	switch t := v.(type) {
	case *time.Time:
		if t == nil {
			return "–"
		}
		return when(*t)
	case time.Time:
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "–"
}

// stat writes a score over seeds: mean ± std.
func stat(s Stat) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return f3(s.Mean)
	}
	return f3(s.Mean) + " ± " + f3(s.Std)
}

// spread writes the range over seeds: [min–max], with counts for
// rollouts.
func spread(s Stat, counts bool) string {
	if s.N < 2 {
		return ""
	}
	if counts {
		return "[" + count(int64(s.Min)) + "–" + count(int64(s.Max)) + "]"
	}
	return "[" + f3(s.Min) + "–" + f3(s.Max) + "]"
}
