package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/whalerun/whale/storage"
)

func TestNewStat(t *testing.T) {
	for _, c := range []struct {
		in                  []float64
		n                   int
		mean, std, min, max float64
	}{
		{[]float64{0.5, 0.4}, 2, 0.45, math.Sqrt(0.005), 0.4, 0.5},
		{[]float64{1, 2, 3, 4}, 4, 2.5, math.Sqrt(5.0 / 3), 1, 4},
		{[]float64{0.3}, 1, 0.3, 0, 0.3, 0.3},
		{[]float64{0.3, math.NaN(), 0.5}, 2, 0.4, math.Sqrt(0.02), 0.3, 0.5},
	} {
		s := NewStat(c.in)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
		if s.N != c.n || !near(s.Mean, c.mean) || !near(s.Std, c.std) || s.Min != c.min || s.Max != c.max {
			t.Errorf("NewStat(%v) = %+v, want n %d mean %v std %v min %v max %v", c.in, s, c.n, c.mean, c.std, c.min, c.max)
		}
	}
	if s := NewStat([]float64{math.NaN()}); s.N != 0 || !math.IsNaN(s.Mean) {
		t.Errorf("NewStat(NaN) = %+v, want no value", s)
	}
}

// seedRun is a finished run with tests at (spend, mean@k) pairs.
func seedRun(name string, seed, spent, budget int64, tests ...float64) *Run {
	r := &Run{Name: name, Schedule: "whale", Seed: seed, Rollouts: spent, Budget: Budget{Rollouts: budget}, State: StateDone, StateNote: "budget spent"}
	for i := 0; i < len(tests); i += 2 {
		r.Tests = append(r.Tests, TestPoint{Position: fmt.Sprint(i), Rollouts: int64(tests[i]), MeanAtK: tests[i+1], K: 2})
	}
	if len(r.Tests) > 0 {
		r.Final, r.Peak = &r.Tests[len(r.Tests)-1], peak(r.Tests)
	}
	return r
}

func TestCompare(t *testing.T) {
	d := &Data{Runs: []*Run{
		seedRun("a1", 1, 300, 300, 100, 0.2, 300, 0.5),
		seedRun("a2", 2, 200, 300, 100, 0.4, 200, 0.3), // stopped short
		seedRun("b1", 1, 300, 300, 150, 0.1, 300, 0.6),
		seedRun("b2", 2, 300, 300, 250, 0.7),
		seedRun("c1", 1, 280, 300, 250, 0.9),
	}}
	if err := Compare(d, []GroupSpec{{"a", []string{"a1", "a2"}}, {"b", []string{"b1", "b2"}}, {"c", []string{"c1"}}}); err != nil {
		t.Fatal(err)
	}
	c := d.Comparison
	if c.EqualSpend != 200 {
		t.Errorf("equal spend %d, want 200 (a2's spend)", c.EqualSpend)
	}
	if len(c.Short) != 1 || c.Short[0].Run != "a2" || c.Short[0].Rollouts != 200 {
		t.Errorf("short runs %+v, want a2 at 200", c.Short)
	}
	for _, w := range []string{"at 200 rollouts", "a2 stopped at 200 of 300 rollouts", "compare them at equal spend", "whale (1 of 2 seeds)"} {
		if !strings.Contains(c.Note, w) {
			t.Errorf("note lacks %q: %s", w, c.Note)
		}
	}
	a, b, cc := c.Groups[0], c.Groups[1], c.Groups[2]
	for _, x := range []struct {
		what string
		got  Stat
		vals []float64
	}{
		{"a peak", a.Peak, []float64{0.5, 0.4}},
		{"a final", a.Final, []float64{0.5, 0.3}},
		{"a at equal spend", a.AtEqualSpend, []float64{0.2, 0.3}},
		{"a rollouts", a.Rollouts, []float64{300, 200}},
		{"b peak", b.Peak, []float64{0.6, 0.7}},
		{"b at equal spend", b.AtEqualSpend, []float64{0.1}}, // b2's first test is at 250
		{"c at equal spend", cc.AtEqualSpend, nil},
	} {
		if fmt.Sprint(x.got.Values) != fmt.Sprint(x.vals) && !(len(x.vals) == 0 && len(x.got.Values) == 0) {
			t.Errorf("%s: values %v, want %v", x.what, x.got.Values, x.vals)
		}
	}
	if fmt.Sprint(a.Seeds) != "[1 2]" || a.Label != "whale" {
		t.Errorf("group a: seeds %v label %q", a.Seeds, a.Label)
	}
	// No value is JSON's null, not an encoding error.
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"at_equal_spend":{"n":0,"values":[],"mean":null`) {
		t.Errorf("report.json of an empty statistic: %s", js)
	}

	for _, bad := range []struct {
		groups []GroupSpec
		want   string
	}{
		{nil, "no group"},
		{[]GroupSpec{{"x", nil}}, "has no run"},
		{[]GroupSpec{{"x", []string{"zz"}}}, `run "zz" is not in the report`},
		{[]GroupSpec{{"x", []string{"a1"}}, {"y", []string{"a1"}}}, "in groups"},
	} {
		if err := Compare(d, bad.groups); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Compare(%v): %v, want %q", bad.groups, err, bad.want)
		}
	}
}

// The seed bands: in seeds.png each group with two seeds has its band's
// colour, and the page, rendered in headless Chromium, shows the
// comparison table and the band. WHALE_REPORT_SCREENSHOT=FILE keeps the
// screenshot.
func TestChromiumRendersSeedBands(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	demoBucket(t)
	s := openDemoStore(t)
	var names []string
	for _, g := range seedGroups {
		names = append(names, g.Runs...)
	}
	d, err := Collect(ctx, s, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(d, seedGroups); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := Write(ctx, d, dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "seeds.png"))
	if err != nil {
		t.Fatalf("no seeds.png: %v (wrote %v)", err, paths)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range d.Comparison.Groups {
		if len(g.Runs) < 2 {
			continue
		}
		if n := countNear(img, blend(bandColor(g.Index)), 2); n < 300 {
			t.Errorf("seeds.png: %d pixels of %s's band colour, want its band drawn", n, g.Name)
		}
	}
	html, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`<section id="comparison">`, "at equal spend (", "±", `src="seeds.png"`} {
		if !strings.Contains(string(html), w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	if strings.Contains(string(html), `src="accuracy.png"`) {
		t.Error("the page shows the per-run accuracy plot beside the seed bands")
	}

	shot := filepath.Join(t.TempDir(), "report.png")
	dom, logs := headless(t, bin, "file://"+filepath.ToSlash(paths[0]), "--dump-dom", "--screenshot="+shot, "--hide-scrollbars")
	m := regexp.MustCompile(`<body[^>]*data-images-ok="(\d+)/(\d+)"`).FindStringSubmatch(dom)
	if m == nil || m[1] != m[2] {
		t.Fatalf("images decoded: %v\n%s", m, tail(dom))
	}
	if msgs := consoleRE.FindAllString(logs, -1); len(msgs) > 0 {
		t.Errorf("the console reported:\n%s", strings.Join(msgs, "\n"))
	}
	raw, err = os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if out := os.Getenv("WHALE_REPORT_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			t.Error(err)
		}
	}
	page, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	// Scaled to CSS pixels the band keeps its colour inside.
	if n := countNear(page, blend(bandColor(0)), 3); n < 200 {
		t.Errorf("%d pixels of the first band's colour in the screenshot, want the band painted", n)
	}
}

func openDemoStore(t *testing.T) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), demoBucket(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blend is c painted over white.
func blend(c color.NRGBA) color.RGBA {
	a := int(c.A)
	f := func(v uint8) uint8 { return uint8((int(v)*a + 255*(255-a) + 127) / 255) }
	return color.RGBA{f(c.R), f(c.G), f(c.B), 255}
}

// countNear counts the pixels within tol of want in every channel.
func countNear(img image.Image, want color.RGBA, tol int) int {
	n := 0
	b := img.Bounds()
	d := func(a, b uint8) int { return max(int(a)-int(b), int(b)-int(a)) }
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			if d(c.R, want.R) <= tol && d(c.G, want.G) <= tol && d(c.B, want.B) <= tol {
				n++
			}
		}
	}
	return n
}
