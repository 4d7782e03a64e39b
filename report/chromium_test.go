package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium finds a headless browser: $WHALE_CHROMIUM, else Debian's
// chromium on the PATH. Without one the test is skipped with the reason,
// except under CI=true, where a missing browser is a failure (the Makefile
// installs it there), as internal/slurmtest does for Slurm.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("renders the report in headless Chromium: skipped in -short mode")
	}
	if p := os.Getenv("WHALE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on the PATH (Debian: apt-get install chromium; or set WHALE_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// headless runs the browser on url with args, in a profile of its own.
// A browser killed by a signal is retried once: on a loaded machine
// Chromium's helper processes sometimes crash, which says nothing about
// the page.
func headless(t *testing.T, bin, url string, args ...string) (stdout, stderr string) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
			"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1280,3000"}
		cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			return out.String(), errb.String()
		}
		var exit *exec.ExitError
		if try == 1 && !timedOut && errors.As(err, &exit) && !exit.Exited() {
			t.Logf("%s died (%v); trying once more", bin, err)
			continue
		}
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, tail(errb.String()))
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// consoleRE matches what the page's console said: a script error, a
// resource the Content-Security-Policy blocked, a failed load.
var consoleRE = regexp.MustCompile(`(?m)^.*:CONSOLE[^\n]*$`)

// The report opens in headless Chromium with no network: the page loads,
// every image decodes (the page's own script counts them into
// data-images-ok), the console stays silent (no blocked resource, no
// script error), and the screenshot shows the plots' colours.
func TestChromiumRendersReport(t *testing.T) {
	bin := chromium(t)
	d, _ := collectDemo(t)
	dir := t.TempDir()
	paths, err := Write(context.Background(), d, dir)
	if err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.ToSlash(paths[0])
	images := 0
	for _, p := range paths {
		if strings.HasSuffix(p, ".png") {
			images++
		}
	}

	shot := filepath.Join(t.TempDir(), "report.png")
	dom, logs := headless(t, bin, url, "--dump-dom", "--screenshot="+shot, "--hide-scrollbars")
	m := regexp.MustCompile(`<body[^>]*data-images-ok="(\d+)/(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's load script did not run: no data-images-ok on <body>\n%s", tail(dom))
	}
	if want := fmt.Sprint(images); m[1] != want || m[2] != want {
		t.Errorf("images decoded: %s of %s, want all %d", m[1], m[2], images)
	}
	if msgs := consoleRE.FindAllString(logs, -1); len(msgs) > 0 {
		t.Errorf("the console reported:\n%s", strings.Join(msgs, "\n"))
	}

	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 2000 {
		t.Errorf("screenshot is %v, want the 1280×3000 window", b)
	}
	if n := distinctColors(img, 200); n < 200 {
		t.Errorf("screenshot has %d distinct colours: blank or unstyled", n)
	}
	// The timeline's bars are in the screenshot: the plots were painted,
	// not only fetched.
	for name, c := range map[string]color.RGBA{"weight phase": weightColor, "harness phase": harnessColor} {
		if n := countColor(img, c); n < 500 {
			t.Errorf("%d pixels of the %s colour in the screenshot, want the timeline drawn", n, name)
		}
	}
}
