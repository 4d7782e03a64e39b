// Package progress draws a progress bar of episodes on a terminal and
// nothing anywhere else.
//
// Contract: New never fails. When the writer is nil or not a terminal
// (a log file, a pipe, Slurm's output), the Bar only counts, so stage code
// calls it unconditionally and batch logs stay free of escape codes.
// A nil *Bar is a valid no-op. Methods are safe for concurrent use.
package progress

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/vbauerster/cupwriter"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Bar counts finished episodes, and draws them when it has a terminal.
type Bar struct {
	p      *mpb.Progress
	bar    *mpb.Bar
	done   atomic.Int64
	failed atomic.Int64
	start  time.Time
	closed atomic.Bool
}

// IsTerminal reports whether w is a terminal, by mpb's own check (an
// *os.File whose descriptor is a tty).
func IsTerminal(w io.Writer) bool {
	return w != nil && cupwriter.New(w, false).IsTerminal()
}

// New starts a bar titled title for total episodes on w. It draws only
// when w is a terminal.
func New(w io.Writer, title string, total int64) *Bar {
	return start(w, title, total, IsTerminal(w))
}

// start is New with the terminal check decided by the caller, so that
// tests can draw into a buffer.
func start(w io.Writer, title string, total int64, draw bool) *Bar {
	b := &Bar{start: time.Now()}
	if !draw {
		return b
	}
	opts := []mpb.ContainerOption{mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(200 * time.Millisecond)}
	if !IsTerminal(w) {
		// A forced bar (tests) has no tty for mpb to detect.
		opts = append(opts, mpb.WithAutoRefresh())
	}
	b.p = mpb.New(opts...)
	b.bar = b.p.AddBar(total,
		mpb.PrependDecorators(
			decor.Name(title+" ", decor.WCSyncSpaceR),
			decor.CountersNoUnit("%d/%d", decor.WCSyncWidth),
		),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string { return fmt.Sprintf("failed %d", b.failed.Load()) }, decor.WCSyncSpace),
			decor.Any(func(decor.Statistics) string { return fmt.Sprintf("%.1f/s", b.Rate()) }, decor.WCSyncSpace),
			decor.Elapsed(decor.ET_STYLE_GO, decor.WCSyncSpace),
		),
	)
	return b
}

// Add counts one finished episode; failed says it ended with an error.
func (b *Bar) Add(failed bool) {
	if b == nil {
		return
	}
	b.done.Add(1)
	if failed {
		b.failed.Add(1)
	}
	if b.bar != nil {
		b.bar.Increment()
	}
}

// Counts returns the episodes finished so far and how many of them failed.
func (b *Bar) Counts() (done, failed int64) {
	if b == nil {
		return 0, 0
	}
	return b.done.Load(), b.failed.Load()
}

// Rate is finished episodes per second since New.
func (b *Bar) Rate() float64 {
	if b == nil {
		return 0
	}
	s := time.Since(b.start).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(b.done.Load()) / s
}

// Close draws the last frame and releases the terminal. A bar closed
// before reaching its total (an error, Ctrl-C) is left as it stood.
// Closing twice is harmless.
func (b *Bar) Close() {
	if b == nil || b.p == nil || b.closed.Swap(true) {
		return
	}
	if !b.bar.Completed() {
		b.bar.Abort(false)
	}
	b.p.Wait()
}
