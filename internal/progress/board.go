package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Board is several bars drawn together, one line each, for work that
// advances in units other than episodes (the demo's runs, in rollouts).
// Off a terminal it draws nothing; callers print their own lines then.
type Board struct {
	p    *mpb.Progress
	mu   sync.Mutex
	rows []*Row
}

// Row is one line of a Board: a counter toward a total and a status text.
type Row struct {
	bar      *mpb.Bar
	mu       sync.Mutex
	n, total int64
	status   string
	// started is the first Set and took its elapsed time at Done: rows
	// wait their turn, so the board's own clock would mislead.
	started time.Time
	took    time.Duration
}

func (r *Row) elapsed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.started.IsZero():
		return "-"
	case r.took > 0:
		return r.took.Round(time.Second).String()
	}
	return time.Since(r.started).Round(time.Second).String()
}

// NewBoard draws on w when it is a terminal.
func NewBoard(w io.Writer) *Board { return newBoard(w, IsTerminal(w)) }

func newBoard(w io.Writer, draw bool) *Board {
	if !draw {
		return &Board{}
	}
	opts := []mpb.ContainerOption{mpb.WithOutput(w), mpb.WithWidth(120), mpb.WithRefreshRate(200 * time.Millisecond)}
	if !IsTerminal(w) {
		opts = append(opts, mpb.WithAutoRefresh())
	}
	return &Board{p: mpb.New(opts...)}
}

// Drawing reports whether the board draws bars (w was a terminal).
func (b *Board) Drawing() bool { return b.p != nil }

// Add appends a row titled title counting toward total.
func (b *Board) Add(title string, total int64) *Row {
	r := &Row{total: total}
	if b.p == nil {
		return r
	}
	// The counter is the row's own: a run that ends below its budget
	// completes its bar without pretending to have spent it all.
	r.bar = b.p.AddBar(total, mpb.BarWidth(30),
		mpb.PrependDecorators(
			decor.Name(title+" ", decor.WCSyncSpaceR),
			decor.Any(func(decor.Statistics) string {
				r.mu.Lock()
				defer r.mu.Unlock()
				return fmt.Sprintf("%d/%d", r.n, r.total)
			}, decor.WCSyncWidth),
		),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string { return r.elapsed() }, decor.WCSyncSpace),
			decor.Any(func(decor.Statistics) string { return " " + r.Status() }),
		),
	)
	b.mu.Lock()
	b.rows = append(b.rows, r)
	b.mu.Unlock()
	return r
}

// Set moves the row's counter to n (never past its total) and its status
// to status.
func (r *Row) Set(n int64, status string) {
	r.mu.Lock()
	r.status, r.n = status, n
	if r.started.IsZero() {
		r.started = time.Now()
	}
	r.mu.Unlock()
	if r.bar != nil {
		r.bar.SetCurrent(n)
	}
}

// Status is the row's status text.
func (r *Row) Status() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Done completes the row: its bar fills to the total whatever was spent,
// since a run may end below its budget.
func (r *Row) Done(status string) {
	r.mu.Lock()
	r.status = status
	if !r.started.IsZero() {
		r.took = max(time.Since(r.started), time.Millisecond)
	}
	r.mu.Unlock()
	if r.bar != nil {
		r.bar.SetTotal(-1, true)
	}
}

// Close draws the last frame and releases the terminal; rows not done are
// left as they stood.
func (b *Board) Close() {
	if b.p == nil {
		return
	}
	b.mu.Lock()
	for _, r := range b.rows {
		if !r.bar.Completed() {
			r.bar.Abort(false)
		}
	}
	b.mu.Unlock()
	b.p.Wait()
}
