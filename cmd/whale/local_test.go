package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

func TestLocalServe(t *testing.T) {
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(filepath.Join(dir, "m.whalelm"), false); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.EncodeCheckpoint(&buf, false); err != nil {
		t.Fatal(err)
	}
	root := "file://" + t.TempDir()
	s := openStore(t, root)
	if err := s.WriteAll(context.Background(), "models/base.whalelm", buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{filepath.Join(dir, "m.whalelm"), dir, "models/base.whalelm"} {
		t.Run(filepath.Base(ref), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ready := make(chan string, 1)
			done := make(chan error, 1)
			var out bytes.Buffer
			go func() {
				done <- runLocalServe(ctx, localServeOptions{Root: root, Checkpoint: ref, Addr: "127.0.0.1:0", Name: "tiny",
					ready: func(u string) { ready <- u }}, &out)
			}()
			var url string
			select {
			case url = <-ready:
			case err := <-done:
				t.Fatalf("serve ended before listening: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("not listening after 30s")
			}
			c, err := models.New(models.Config{Endpoints: []string{url}, Model: "tiny"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Chat(ctx, models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}},
				Sampling: models.Sampling{MaxTokens: models.Ptr(int64(3))}})
			if err != nil {
				t.Fatal(err)
			}
			if r.Model != "tiny" || r.CompletionTokens < 1 || r.CompletionTokens > 3 {
				t.Errorf("reply %+v", r)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if !strings.Contains(out.String(), "serving tiny") {
				t.Errorf("output %q", out.String())
			}
		})
	}
	r := whale(t, "local", "serve", "--checkpoint", filepath.Join(dir, "missing"))
	if r.code != 2 || r.err == nil || !strings.Contains(r.err.Error(), "missing") {
		t.Errorf("missing checkpoint: code %d, %v", r.code, r.err)
	}
}
