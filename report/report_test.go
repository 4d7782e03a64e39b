package report

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/storage"
)

// collectDemo collects the four demo runs.
func collectDemo(t *testing.T) (*Data, *storage.Store) {
	t.Helper()
	ctx := context.Background()
	s, err := storage.Open(ctx, demoBucket(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	d, err := Collect(ctx, s, demoNames)
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// Collect on real runs of the demo domain: the report's numbers agree
// with what the manifests hold, counted independently here from the
// rollout rows of each committed stage.
func TestCollectDemoRuns(t *testing.T) {
	d, s := collectDemo(t)
	ctx := context.Background()
	type shape struct {
		state                   string
		weight, harness, tests  bool
		lastTestAtEnd, frontier bool
	}
	want := map[string]shape{
		"demo-whale":   {StateDone, true, true, true, true, true},
		"demo-weights": {StateDone, true, false, true, true, false},
		"demo-harness": {StateDone, false, true, true, true, true},
		"demo-partial": {StateInProgress, true, false, false, false, false},
	}
	for _, r := range d.Runs {
		w := want[r.Name]
		ms, err := storage.ListCommitted(ctx, s, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		var budgeted, test int64
		for _, m := range ms {
			rows := m.Rows("rollouts")
			switch {
			case strings.HasSuffix(m.Position, "t"):
				test += rows
			case m.Stage == pipeline.StageRollout || m.Stage == pipeline.StageEvaluate:
				budgeted += rows
			}
		}
		if r.Rollouts != budgeted || r.TestRollouts != test {
			t.Errorf("%s: rollouts %d and test rollouts %d; the manifests hold %d and %d", r.Name, r.Rollouts, r.TestRollouts, budgeted, test)
		}
		if r.State != w.state {
			t.Errorf("%s: state %q (%s), want %q", r.Name, r.State, r.StateNote, w.state)
		}
		if (r.WeightSteps > 0) != w.weight || (r.HarnessIterations > 0) != w.harness || (len(r.Tests) > 0) != w.tests {
			t.Errorf("%s: %d weight steps, %d harness iterations, %d tests; want weight %v harness %v tests %v",
				r.Name, r.WeightSteps, r.HarnessIterations, len(r.Tests), w.weight, w.harness, w.tests)
		}
		if w.lastTestAtEnd && (r.Final == nil || r.Final.Rollouts != r.Rollouts) {
			t.Errorf("%s: final test %+v, want one at the run's %d rollouts", r.Name, r.Final, r.Rollouts)
		}
		frontier := slices.ContainsFunc(r.Candidates, func(c Candidate) bool { return c.OnFrontier })
		winners := 0
		for _, c := range r.Candidates {
			if c.Winner {
				winners++
			}
		}
		harnessPhases := 0
		for _, p := range r.Phases {
			if p.Kind == KindHarness {
				harnessPhases++
				if p.Winner == "" {
					t.Errorf("%s: harness phase %d has no winner", r.Name, p.Number)
				}
			}
		}
		if frontier != w.frontier || winners != harnessPhases {
			t.Errorf("%s: frontier %v (want %v), %d winners for %d harness phases", r.Name, frontier, w.frontier, winners, harnessPhases)
		}
		// The x of every test is the sum of the budgeted units before it.
		var x int64
		for _, u := range r.Units {
			if u.Kind == KindTest {
				if u.RolloutsBefore != x || u.RolloutsAfter != x {
					t.Errorf("%s %s: test at %d-%d, want %d", r.Name, u.Position, u.RolloutsBefore, u.RolloutsAfter, x)
				}
				continue
			}
			x += u.Rollouts
		}
		if r.Started == nil || r.WallSeconds <= 0 || r.StageSeconds <= 0 {
			t.Errorf("%s: no times: %v %v %v", r.Name, r.Started, r.WallSeconds, r.StageSeconds)
		}
	}
}

// Write: the page, one PNG per plot and report.json, every image the
// page names present and decodable, no reference outside the folder.
func TestWriteDemoRuns(t *testing.T) {
	d, _ := collectDemo(t)
	dir := filepath.Join(t.TempDir(), "out")
	paths, err := Write(context.Background(), d, dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	wantFiles := []string{"index.html", "accuracy.png", "timeline.png", "frontier-demo-whale.png", "frontier-demo-harness.png", "acceptance.png", "report.json"}
	if !slices.Equal(names, wantFiles) {
		t.Errorf("files %v, want %v", names, wantFiles)
	}
	html, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	srcs := regexp.MustCompile(`<img src="([^"]*)" width="(\d+)" height="(\d+)"`).FindAllStringSubmatch(page, -1)
	if len(srcs) != 5 {
		t.Errorf("%d images on the page, want 5", len(srcs))
	}
	for _, m := range srcs {
		f, err := os.Open(filepath.Join(dir, m[1]))
		if err != nil {
			t.Fatalf("the page shows %s: %v", m[1], err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		// Rendered at twice the size the page gives it.
		if w := atoi(m[2]); cfg.Width < 2*w-2 || cfg.Width > 2*w+2 {
			t.Errorf("%s: %d pixels wide, shown %s wide", m[1], cfg.Width, m[2])
		}
	}
	for _, bad := range []string{"http://", "https://", "//cdn", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the page references %q: it must open with no network", bad)
		}
	}
	for _, s := range []string{"demo-whale (whale, fixed E=0.5 I=3)", "weights-only", "harness-only", "in progress", "dashed line"} {
		if !strings.Contains(page, s) {
			t.Errorf("the page does not mention %q", s)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, DataName))
	if err != nil {
		t.Fatal(err)
	}
	var back Data
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.MarshalIndent(&back, "", "  ")
	if string(again)+"\n" != string(raw) {
		t.Error("report.json does not decode to the same data")
	}
	if len(back.Runs) != 4 || back.Runs[0].Final == nil || len(back.Runs[0].Units) == 0 {
		t.Errorf("report.json lacks the runs' data: %d runs", len(back.Runs))
	}
	// Writing again replaces the files and leaves no temporary ones.
	if _, err := Write(context.Background(), d, dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(wantFiles) {
		t.Errorf("%d entries in the folder after a second write, want %d", len(entries), len(wantFiles))
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// Text from the artifacts is escaped, plots with nothing to show are
// replaced by a sentence, and an empty run still renders.
func TestWriteEscapesAndEmpty(t *testing.T) {
	r, err := build("x", frozen(t, "whale", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Description = `<script>alert("run")</script>`
	r.StateNote = `next: <img src=x onerror=alert(1)>`
	r.Label = `x (<b>whale</b>)`
	d := &Data{Root: "file:///tmp/a&b", WhaleVersion: "test", Runs: []*Run{r}}
	dir := t.TempDir()
	paths, err := Write(context.Background(), d, dir)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	// The timeline always renders (an empty row); the other plots have
	// nothing to show.
	if !slices.Equal(names, []string{"index.html", "timeline.png", "report.json"}) {
		t.Errorf("files %v", names)
	}
	html, _ := os.ReadFile(paths[0])
	page := string(html)
	for _, bad := range []string{"<script>alert", "<img src=x", "<b>whale"} {
		if strings.Contains(page, bad) {
			t.Errorf("unescaped %q in the page", bad)
		}
	}
	for _, s := range []string{"&lt;script&gt;alert", missingAccuracy, missingFrontier, missingAcceptance, "No committed stage yet", "file:///tmp/a&amp;b"} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
}

// The inline scripts and styles are the page's own; count them so that a
// template change that adds one is a decision, not an accident.
func TestPageHasOneScript(t *testing.T) {
	if n := strings.Count(pageSource, "<script"); n != 1 {
		t.Errorf("%d scripts in the page template, want 1", n)
	}
}

// distinctColors counts the colours of img, up to limit.
func distinctColors(img image.Image, limit int) int {
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

func countColor(img image.Image, want color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == want {
				n++
			}
		}
	}
	return n
}

// The plots themselves are not blank: each PNG has its run colours.
func TestFiguresDrawData(t *testing.T) {
	d, _ := collectDemo(t)
	figs := map[string]func() (*figure, error){
		"accuracy":   func() (*figure, error) { return accuracyFigure(d) },
		"timeline":   func() (*figure, error) { return timelineFigure(d) },
		"acceptance": func() (*figure, error) { return acceptanceFigure(d) },
		"frontier":   func() (*figure, error) { return frontierFigure(d.Runs[0]) },
	}
	wantColor := map[string]color.RGBA{"accuracy": runColor(1), "timeline": harnessColor, "acceptance": runColor(3), "frontier": runColor(0)}
	for name, fn := range figs {
		f, err := fn()
		if err != nil || f == nil {
			t.Fatalf("%s: %v, %v", name, f, err)
		}
		img, err := png.Decode(bytes.NewReader(f.png))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := countColor(img, wantColor[name]); n < 50 {
			t.Errorf("%s: %d pixels of %v, want the data drawn", name, n, wantColor[name])
		}
	}
}
