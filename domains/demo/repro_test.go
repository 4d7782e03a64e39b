package demo

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/whalerun/whale/models/local"
)

// TestPretrainReproduces rebuilds testdata/pretrained.wlm from
// DefaultPretrain and compares the weights' digest. It takes minutes, so
// it runs only when DEMO_PRETRAIN=1 (and on two threads, as the README
// command does).
func TestPretrainReproduces(t *testing.T) {
	if os.Getenv("DEMO_PRETRAIN") != "1" {
		t.Skip("minutes of training: set DEMO_PRETRAIN=1 to rebuild the checkpoint and compare digests")
	}
	want, err := local.Load(pretrainedPath)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m, err := Pretrain(context.Background(), DefaultPretrain)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pretrained %d steps in %v", m.Step(), time.Since(start).Round(time.Second))
	if m.Digest() != want.Digest() {
		t.Errorf("digest %s, committed checkpoint %s", m.Digest(), want.Digest())
	}
}
