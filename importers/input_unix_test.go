//go:build unix

package importers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/schemas"
)

func mkfifo(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return p
}

// A FIFO (a shell's <(zcat …)) is read once, into a copy that detection,
// the digest and the import then read; Close removes the copy.
func TestFIFOInput(t *testing.T) {
	p := mkfifo(t, "tasks.jsonl")
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.WriteString(goodLines(3))
		f.Close()
	}()
	in, err := OpenInput(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := in.Detect(); err != nil || f != FormatJSONL {
		t.Errorf("Detect = %v, %v", f, err)
	}
	for range 2 { // read twice: it is a copy
		var got []schemas.Task
		if err := in.Import(context.Background(), FormatUnknown, Options{Domain: "math"}, collect(t, &got)); err != nil || len(got) != 3 {
			t.Fatalf("Import: %d tasks, %v", len(got), err)
		}
		if got[0].ID != "q0" {
			t.Errorf("id %q", got[0].ID)
		}
	}
	copyPath := in.path
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(copyPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copy left behind: %v", err)
	}
}

// A cancel ends the reading of a FIFO promptly, whether whale waits for a
// writer, for a silent writer's bytes, or copies an endless stream.
func TestFIFOCancel(t *testing.T) {
	cases := map[string]func(w *os.File){
		"no writer":     nil,
		"silent writer": func(w *os.File) {},
		"endless writer": func(w *os.File) {
			line := []byte(goodLines(1))
			for {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			p := mkfifo(t, "t.jsonl")
			if write != nil {
				go func() {
					w, err := os.OpenFile(p, os.O_WRONLY, 0)
					if err != nil {
						return
					}
					defer w.Close()
					write(w)
					time.Sleep(10 * time.Second) // silent until the reader leaves
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			var err error
			within(t, 3*time.Second, "a cancelled FIFO read", func() {
				var in *Input
				in, err = OpenInput(ctx, p, Options{})
				if in != nil {
					in.Close()
				}
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the context's", err)
			}
			if write == nil {
				// Let the blocked open return.
				if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
			}
		})
	}
}
