package searchdemo

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/whalerun/whale/models/local"
)

// TestPretrainDeterministic: the same options give the same weights, and
// another seed other weights.
func TestPretrainDeterministic(t *testing.T) {
	ctx := context.Background()
	o := PretrainOptions{Seed: 3, Steps: 2, Batch: 4}
	a, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Seed = 4
	c, err := Pretrain(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() {
		t.Errorf("digests %s, %s (same options), %s (another seed)", a.Digest(), b.Digest(), c.Digest())
	}
	if a.Config() != Config() {
		t.Errorf("config %+v, want %+v", a.Config(), Config())
	}
}

// TestPretrainReproduces rebuilds testdata/pretrained.wlm from
// DefaultPretrain and compares the weights' digest. It takes about half
// an hour on two cores, so it runs only when DEMO_PRETRAIN=1 (and on two
// threads, as the README command does).
func TestPretrainReproduces(t *testing.T) {
	if os.Getenv("DEMO_PRETRAIN") != "1" {
		t.Skip("half an hour of training: set DEMO_PRETRAIN=1 to rebuild the checkpoint and compare digests")
	}
	want, err := local.Load("testdata/pretrained.wlm")
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
