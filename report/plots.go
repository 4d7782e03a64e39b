package report

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// dpi renders the PNGs at twice the CSS pixel density (96 per inch), so
// that they stay sharp on high-density screens and when printed.
const dpi = 192

// cssDPI is the pixels per inch of CSS.
const cssDPI = 96

// figure is one rendered plot.
type figure struct {
	File    string
	Title   string
	Alt     string
	Caption string
	Width   int // CSS pixels
	Height  int
	png     []byte
}

var (
	// runColors tell runs apart in every plot and in the tables
	// (Tableau 10: distinct, and readable for most colour blindness).
	runColors = []color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255},
		{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
	}
	runGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
		draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}
	weightColor  = color.RGBA{76, 114, 176, 255}
	harnessColor = color.RGBA{221, 132, 82, 255}
	testColor    = color.RGBA{20, 20, 20, 255}
	gridColor    = color.RGBA{225, 225, 225, 255}
)

func runColor(i int) color.RGBA       { return runColors[i%len(runColors)] }
func runGlyph(i int) draw.GlyphDrawer { return runGlyphs[i%len(runGlyphs)] }
func hexColor(c color.RGBA) string    { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }
func lighter(c color.RGBA) color.RGBA { return color.RGBA{mix(c.R), mix(c.G), mix(c.B), 255} }
func mix(v uint8) uint8               { return uint8((int(v) + 2*255) / 3) }
func sansFont(size vg.Length) font.Font {
	return font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, size)
}
func inches(v float64) vg.Length          { return vg.Length(v) * vg.Inch }
func cssPixels(l vg.Length) int           { return int(math.Round(float64(l/vg.Inch) * cssDPI)) }
func yRange(p *plot.Plot, lo, hi float64) { p.Y.Min, p.Y.Max = lo, hi }

// newPlot is a plot in the page's style: sans-serif text and a light grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = sansFont(13)
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = sansFont(11)
		a.Tick.Label.Font = sansFont(10)
		a.Padding = vg.Points(2)
	}
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Legend.TextStyle.Font = sansFont(10)
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = gridColor, gridColor
	p.Add(g)
	return p
}

// render draws p as a PNG of w × h.
func render(p *plot.Plot, f *figure, w, h vg.Length) error {
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))}
	// A margin on the right and at the top keeps the last tick label, the
	// markers at the range's end and the legend off the image's edge.
	p.Draw(draw.Crop(draw.New(c), 0, -vg.Points(12), 0, -vg.Points(6)))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("render %s: %w", f.File, err)
	}
	f.png, f.Width, f.Height = buf.Bytes(), cssPixels(w), cssPixels(h)
	return nil
}

// intTicks labels whole numbers only: weight steps have no halves.
var intTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label != "" && t.Value == math.Trunc(t.Value) {
			out = append(out, plot.Tick{Value: t.Value, Label: strconv.FormatFloat(t.Value, 'f', 0, 64)})
		}
	}
	return out
})

// countTicks labels rollouts without exponents: 300000 reads as 300k.
var countTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	ts := (plot.DefaultTicks{}).Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = compact(ts[i].Value)
		}
	}
	return ts
})

// compact writes a count as 950, 12k, 1.5M.
func compact(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// accuracyFigure: test mean@k against budgeted rollouts, a line per run.
func accuracyFigure(d *Data) (*figure, error) {
	f := &figure{File: "accuracy.png", Title: "Test accuracy against rollouts",
		Alt: "line plot of test mean@k against cumulative rollouts, one line per run"}
	ks := map[int]bool{}
	var maxX int64
	var maxY float64
	found := false
	for _, r := range d.Runs {
		for _, t := range r.Tests {
			ks[t.K] = true
			maxX, maxY = max(maxX, t.Rollouts), max(maxY, t.MeanAtK)
			found = true
		}
	}
	if !found {
		return nil, nil
	}
	ylabel := "test mean@k"
	if len(ks) == 1 {
		for k := range ks {
			ylabel = fmt.Sprintf("test mean@%d", k)
		}
	}
	p := newPlot("", "rollouts (weight steps + harness search; tests not counted)", ylabel)
	p.X.Tick.Marker = countTicks
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(-4)
	extended, entries := false, 0
	for i, r := range d.Runs {
		if len(r.Tests) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(r.Tests))
		for j, t := range r.Tests {
			pts[j] = plotter.XY{X: float64(t.Rollouts), Y: t.MeanAtK}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("accuracy plot, run %s: %w", r.Name, err)
		}
		line.Color, line.Width = runColor(i), vg.Points(1.8)
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("accuracy plot, run %s: %w", r.Name, err)
		}
		sc.Shape, sc.Color, sc.Radius = runGlyph(i), runColor(i), vg.Points(3.5)
		p.Add(line, sc)
		if last := r.Tests[len(r.Tests)-1]; last.Rollouts < maxX {
			ext, err := plotter.NewLine(plotter.XYs{{X: float64(last.Rollouts), Y: last.MeanAtK}, {X: float64(maxX), Y: last.MeanAtK}})
			if err != nil {
				return nil, err
			}
			ext.Color, ext.Width, ext.Dashes = runColor(i), vg.Points(1.2), []vg.Length{vg.Points(5), vg.Points(4)}
			p.Add(ext)
			extended = true
		}
		p.Legend.Add(r.Label, line, sc)
		entries++
	}
	// Room above the curves for the legend.
	yRange(p, 0, math.Min(1, maxY*1.15+0.05+0.045*float64(entries)))
	p.X.Min = 0
	f.Caption = "Each marker is a test evaluation (mean@k over the test split, k samples per task) of the (model, harness) pair in force after a phase, placed at the rollouts the run had spent before it on weight steps and harness search; test rollouts are not counted. Read across at a fixed x to compare schedules at equal cost."
	if extended {
		f.Caption += " A dashed line carries a run's last score on to the largest x of any run: it was not measured there, it only keeps the comparison at equal rollouts readable."
	}
	return f, render(p, f, inches(9), inches(4.6))
}

// timelineFigure: a row of phase bars per run over budgeted rollouts.
func timelineFigure(d *Data) (*figure, error) {
	f := &figure{File: "timeline.png", Title: "Phase timeline",
		Alt: "one row per run: weight phases and harness phases as bars over cumulative rollouts, tests as black marks"}
	t := &timeline{}
	names := make([]string, len(d.Runs))
	for i, r := range d.Runs {
		row := timelineRow{y: float64(len(d.Runs) - 1 - i), phases: r.Phases}
		for _, u := range r.Units {
			if u.Kind == KindTest {
				row.tests = append(row.tests, u.RolloutsBefore)
			}
		}
		t.maxX = max(t.maxX, float64(r.Rollouts))
		t.rows = append(t.rows, row)
		names[len(d.Runs)-1-i] = r.Name
	}
	p := newPlot("", "rollouts (weight steps + harness search; tests not counted)", "")
	p.X.Tick.Marker = countTicks
	p.Add(t)
	p.NominalY(names...)
	p.Y.Tick.Label.Font = sansFont(10)
	p.X.Min = 0
	// Room above the top row for the legend.
	p.Y.Min, p.Y.Max = -0.5, float64(len(d.Runs))-0.5+1.1
	p.Legend.Top = true
	p.Legend.Add("weight phase (rollout → filter → finetune)", swatch(weightColor))
	p.Legend.Add("harness phase (propose → evaluate)", swatch(harnessColor))
	p.Legend.Add("test evaluation", testMark{})
	f.Caption = "One row per run, left to right in the order the run spent its rollouts. Blue bars are weight phases (RSFT steps), orange bars harness phases (harness search); a bar's label says its round and how many steps or iterations it holds, where it fits. Black marks are the test evaluations, which cost no budget. A pale bar is a phase still in progress."
	h := 1.2 + 0.5*(float64(len(d.Runs))+1.1)
	return f, render(p, f, inches(9), inches(h))
}

type timelineRow struct {
	y      float64
	phases []Phase
	tests  []int64
}

// timeline is a plot.Plotter of phase bars.
type timeline struct {
	rows []timelineRow
	maxX float64
}

func (t *timeline) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, max(t.maxX, 1), -0.5, float64(len(t.rows)) - 0.5
}

func (t *timeline) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	label := text.Style{Font: sansFont(9), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: p.TextHandler}
	edge := draw.LineStyle{Color: color.White, Width: vg.Points(1)}
	for _, row := range t.rows {
		y0, y1 := ty(row.y-0.3), ty(row.y+0.3)
		for _, ph := range row.phases {
			x0, x1 := tx(float64(ph.Start)), tx(float64(ph.End))
			if x1-x0 < 2 {
				x1 = x0 + 2 // a phase that spent nothing still shows
			}
			col, ink := weightColor, color.Color(color.White)
			if ph.Kind == KindHarness {
				col = harnessColor
			}
			if !ph.Done {
				col, ink = lighter(col), testColor
			}
			box := []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
			c.FillPolygon(col, box)
			c.StrokeLines(edge, append(box, box[0]))
			label.Color = ink
			for _, s := range phaseLabels(ph) {
				if label.Width(s)+vg.Points(6) <= x1-x0 {
					c.FillText(label, vg.Point{X: (x0 + x1) / 2, Y: (y0 + y1) / 2}, s)
					break
				}
			}
		}
		mark := draw.LineStyle{Color: testColor, Width: vg.Points(1.5)}
		for _, x := range row.tests {
			xx := tx(float64(x))
			c.StrokeLine2(mark, xx, y0-vg.Points(3), xx, y1+vg.Points(3))
			c.DrawGlyph(draw.GlyphStyle{Color: testColor, Radius: vg.Points(3), Shape: draw.PyramidGlyph{}}, vg.Point{X: xx, Y: y1 + vg.Points(7)})
		}
	}
}

// phaseLabels are a phase's labels, longest first: the bar shows the
// longest that fits.
func phaseLabels(ph Phase) []string {
	unit, short := "step", "w"
	if ph.Kind == KindHarness {
		unit, short = "iteration", "h"
	}
	if ph.Units != 1 {
		unit += "s"
	}
	n := strconv.Itoa(ph.Units)
	return []string{fmt.Sprintf("r%03d · %s %s", ph.Round, n, unit), n + " " + unit, n + short, n}
}

// swatch is a legend thumbnail filled with one colour.
type swatch color.RGBA

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(color.RGBA(s), []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
}

// testMark is the legend thumbnail of a test evaluation.
type testMark struct{}

func (testMark) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(draw.LineStyle{Color: testColor, Width: vg.Points(1.5)}, x, c.Min.Y, x, c.Max.Y)
}

// frontierFigure: one run's scored search candidates in the (mean turns,
// success) plane, with each harness phase's Pareto frontier.
func frontierFigure(r *Run) (*figure, error) {
	var phases []int
	for _, c := range r.Candidates {
		if c.Tasks > 0 && !slices.Contains(phases, c.Phase) {
			phases = append(phases, c.Phase)
		}
	}
	if len(phases) == 0 {
		return nil, nil
	}
	f := &figure{File: "frontier-" + r.Name + ".png", Title: "Harness search: " + r.Label,
		Alt: "scatter of the harness candidates of run " + r.Name + " by mean turns and search-set success, with each harness phase's Pareto frontier"}
	p := newPlot("", "mean turns per episode (fewer is better)", "success on the search set")
	p.Legend.Top = true
	winners := plotter.XYs{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range r.Candidates {
		if c.Tasks > 0 {
			lo, hi = math.Min(lo, c.MeanTurns), math.Max(hi, c.MeanTurns)
		}
	}
	pad := (hi - lo) * 0.06
	if pad == 0 {
		pad = 0.5
	}
	p.X.Min, p.X.Max = math.Max(0, lo-pad), hi+pad
	for j, ph := range phases {
		var pts, front plotter.XYs
		round, iters := 0, map[string]bool{}
		for _, c := range r.Candidates {
			if c.Phase != ph || c.Tasks == 0 {
				continue
			}
			round = c.Round
			iters[c.Position] = true
			pts = append(pts, plotter.XY{X: c.MeanTurns, Y: c.Success})
			if c.OnFrontier {
				front = append(front, plotter.XY{X: c.MeanTurns, Y: c.Success})
			}
			if c.Winner {
				winners = append(winners, plotter.XY{X: c.MeanTurns, Y: c.Success})
			}
		}
		slices.SortFunc(front, func(a, b plotter.XY) int {
			return cmp.Or(cmp.Compare(a.X, b.X), cmp.Compare(a.Y, b.Y))
		})
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("frontier plot, run %s: %w", r.Name, err)
		}
		sc.Shape, sc.Color, sc.Radius = runGlyph(j), runColor(j), vg.Points(3)
		line, err := plotter.NewLine(front)
		if err != nil {
			return nil, fmt.Errorf("frontier plot, run %s: %w", r.Name, err)
		}
		line.Color, line.Width = runColor(j), vg.Points(1.5)
		p.Add(line, sc)
		p.Legend.Add(fmt.Sprintf("round %d harness phase: %d candidates, %d iterations", round, len(pts), len(iters)), line, sc)
	}
	if len(winners) > 0 {
		w, err := plotter.NewScatter(winners)
		if err != nil {
			return nil, err
		}
		w.Shape, w.Color, w.Radius = draw.RingGlyph{}, testColor, vg.Points(6.5)
		p.Add(w)
		p.Legend.Add("the phase's winner", w)
	}
	yRange(p, 0, 1.05+0.07*float64(len(phases)+1))
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var out []plot.Tick
		for _, t := range (plot.DefaultTicks{}).Ticks(0, 1) {
			if t.Value <= 1 {
				out = append(out, t)
			}
		}
		return out
	})
	f.Caption = "Every harness candidate scored on the search set, placed by its mean turns per episode (x) and its success, mean reward over the search tasks (y). Up and to the left is better. The line joins each harness phase's Pareto frontier: the candidates no other candidate of that phase beats on both success and turns. The ring marks the candidate each phase handed on (top success, then fewer turns, then the earlier one)."
	if len(phases) > 1 {
		f.Caption += " Phases are told apart by colour; the model's weights change between them, so their scores are not directly comparable."
	}
	return f, render(p, f, inches(9), inches(4.6))
}

// acceptanceFigure: the filter's acceptance rate per weight step.
func acceptanceFigure(d *Data) (*figure, error) {
	f := &figure{File: "acceptance.png", Title: "Acceptance rate per weight step",
		Alt: "line plot of the filter's acceptance rate against the weight step number, one line per run"}
	p := newPlot("", "weight step (counted across the run)", "acceptance rate")
	p.X.Tick.Marker = intTicks
	p.Legend.Top = true
	var maxX, maxY float64
	entries := 0
	for i, r := range d.Runs {
		var pts plotter.XYs
		for _, u := range r.Units {
			if u.Kind == KindWeight && u.AcceptanceRate != nil {
				pts = append(pts, plotter.XY{X: float64(u.Step), Y: *u.AcceptanceRate})
				maxX, maxY = max(maxX, float64(u.Step)), max(maxY, *u.AcceptanceRate)
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("acceptance plot, run %s: %w", r.Name, err)
		}
		ci := d.colorOf(i)
		line.Color, line.Width = runColor(ci), vg.Points(1.5)
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("acceptance plot, run %s: %w", r.Name, err)
		}
		sc.Shape, sc.Color, sc.Radius = runGlyph(ci), runColor(ci), vg.Points(3)
		p.Add(line, sc)
		p.Legend.Add(r.Label, line, sc)
		entries++
	}
	if entries == 0 {
		return nil, nil
	}
	p.X.Min, p.X.Max = 0.5, maxX+0.5
	yRange(p, 0, math.Min(1.05, maxY*1.15+0.05)+0.06*float64(entries))
	f.Caption = "The share of a weight step's training rollouts that the filter accepted (reward above rsft.threshold) and so became fine-tuning examples. Steps are numbered across the whole run, weight phases one after the other; a rising rate means the model (and the harness it rolls out with) solves more of the training tasks."
	return f, render(p, f, inches(9), inches(4.2))
}

// bandAlpha is the opacity of a seed band: overlapping bands of two
// schedules stay readable.
const bandAlpha = 72

// bandColor is group i's band colour: its run colour, translucent.
func bandColor(i int) color.NRGBA {
	c := runColor(i)
	return color.NRGBA{R: c.R, G: c.G, B: c.B, A: bandAlpha}
}

// stepXYs draws a run's test scores as the score in force: flat from each
// test to the next, ending at its last test.
func stepXYs(r *Run) plotter.XYs {
	var pts plotter.XYs
	for j, t := range r.Tests {
		if j > 0 {
			pts = append(pts, plotter.XY{X: float64(t.Rollouts), Y: r.Tests[j-1].MeanAtK})
		}
		pts = append(pts, plotter.XY{X: float64(t.Rollouts), Y: t.MeanAtK})
	}
	return pts
}

// bandXYs is the min–max band over runs of the score in force, from 0 to
// the smallest last-test spend of the runs (where every run has a score);
// nil when fewer than two runs have tests.
func bandXYs(runs []*Run) (band, mean plotter.XYs) {
	end := int64(-1)
	var xs []int64
	for _, r := range runs {
		if len(r.Tests) == 0 {
			return nil, nil
		}
		last := r.Tests[len(r.Tests)-1].Rollouts
		if end < 0 || last < end {
			end = last
		}
		for _, t := range r.Tests {
			xs = append(xs, t.Rollouts)
		}
	}
	if len(runs) < 2 {
		return nil, nil
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	var grid []int64
	for _, x := range xs {
		if x <= end {
			grid = append(grid, x)
		}
	}
	var upper, lower plotter.XYs
	for j, x := range grid {
		next := end
		if j+1 < len(grid) {
			next = grid[j+1]
		}
		var vals []float64
		for _, r := range runs {
			if v := ScoreAt(r, x); !math.IsNaN(v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			continue
		}
		s := NewStat(vals)
		upper = append(upper, plotter.XY{X: float64(x), Y: s.Max}, plotter.XY{X: float64(next), Y: s.Max})
		lower = append(lower, plotter.XY{X: float64(x), Y: s.Min}, plotter.XY{X: float64(next), Y: s.Min})
		mean = append(mean, plotter.XY{X: float64(x), Y: s.Mean}, plotter.XY{X: float64(next), Y: s.Mean})
	}
	if len(upper) == 0 {
		return nil, nil
	}
	slices.Reverse(lower)
	return append(upper, lower...), mean
}

// seedsFigure: per schedule, every seed's test curve, the min–max band
// over seeds and the seed mean; the equal-spend line.
func seedsFigure(d *Data) (*figure, error) {
	c := d.Comparison
	if c == nil {
		return nil, nil
	}
	f := &figure{File: "seeds.png", Title: "Test accuracy against rollouts, over seeds",
		Alt: "per schedule: a thin line per seed, a shaded band from the lowest to the highest seed, and a thick line for the seed mean, of test mean@k against cumulative rollouts"}
	byName := map[string]*Run{}
	for _, r := range d.Runs {
		byName[r.Name] = r
	}
	k, maxY, found := 0, 0.0, false
	for _, r := range d.Runs {
		for _, t := range r.Tests {
			k, maxY, found = t.K, max(maxY, t.MeanAtK), true
		}
	}
	if !found {
		return nil, nil
	}
	p := newPlot("", "rollouts (weight steps + harness search; tests not counted)", fmt.Sprintf("test mean@%d", k))
	p.X.Tick.Marker = countTicks
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(-4)
	entries := 0
	for _, g := range c.Groups {
		runs := make([]*Run, len(g.Runs))
		for j, n := range g.Runs {
			runs[j] = byName[n]
		}
		band, mean := bandXYs(runs)
		var thumbs []plot.Thumbnailer
		if band != nil {
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return nil, fmt.Errorf("seeds plot, %s: %w", g.Name, err)
			}
			poly.Color, poly.LineStyle.Width = bandColor(g.Index), 0
			p.Add(poly)
			thumbs = append(thumbs, poly)
		}
		for _, r := range runs {
			if len(r.Tests) == 0 {
				continue
			}
			line, err := plotter.NewLine(stepXYs(r))
			if err != nil {
				return nil, fmt.Errorf("seeds plot, run %s: %w", r.Name, err)
			}
			line.Color, line.Width = runColor(g.Index), vg.Points(0.8)
			// Markers at the tests: a run with one test has no line.
			pts := make(plotter.XYs, len(r.Tests))
			for j, t := range r.Tests {
				pts[j] = plotter.XY{X: float64(t.Rollouts), Y: t.MeanAtK}
			}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, fmt.Errorf("seeds plot, run %s: %w", r.Name, err)
			}
			sc.Shape, sc.Color, sc.Radius = runGlyph(g.Index), runColor(g.Index), vg.Points(2.2)
			p.Add(line, sc)
			if mean == nil && len(thumbs) == 0 {
				thumbs = append(thumbs, line, sc)
			}
		}
		if mean != nil {
			line, err := plotter.NewLine(mean)
			if err != nil {
				return nil, fmt.Errorf("seeds plot, %s: %w", g.Name, err)
			}
			line.Color, line.Width = runColor(g.Index), vg.Points(2.4)
			p.Add(line)
			thumbs = append(thumbs, line)
		}
		if len(thumbs) > 0 {
			p.Legend.Add(fmt.Sprintf("%s, %d seeds", g.Label, len(runs)), thumbs...)
			entries++
		}
	}
	if c.EqualSpend > 0 {
		top := math.Min(1, maxY*1.15+0.05)
		eq, err := plotter.NewLine(plotter.XYs{{X: float64(c.EqualSpend), Y: 0}, {X: float64(c.EqualSpend), Y: top}})
		if err != nil {
			return nil, err
		}
		eq.Color, eq.Width, eq.Dashes = testColor, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(eq)
		p.Legend.Add(fmt.Sprintf("equal spend: %s rollouts", compact(float64(c.EqualSpend))), eq)
		entries++
	}
	yRange(p, 0, math.Min(1, maxY*1.15+0.05+0.045*float64(entries)))
	p.X.Min = 0
	f.Caption = "One colour per schedule. Thin lines with markers are single seeds: each run's test mean@k (a marker per test, at the rollouts spent before it; the line holds the score in force until the next test). The shaded band spans the lowest to the highest seed where every seed has a score, and the thick line is the seed mean. The dashed vertical line is the equal-spend point, the smallest spend any run reached, where the table's 'at equal spend' column reads every run."
	return f, render(p, f, inches(9), inches(5))
}
