package local

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func trainedModel(t testing.TB) *Model {
	t.Helper()
	m := newTestModel(t, smallCfg, 9)
	ids, mask, err := Encode(chat("q", "answer"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TrainStep(context.Background(), []Example{{ids, mask}}, TrainOptions{LR: 1e-3, WeightDecay: 0.1}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheckpointRoundTrip(t *testing.T) {
	m := trainedModel(t)
	dir := t.TempDir()
	for _, withOpt := range []bool{false, true} {
		path := filepath.Join(dir, "m.ckpt")
		if err := m.Save(path, withOpt); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Config() != m.Config() || got.Step() != m.Step() || got.Digest() != m.Digest() {
			t.Fatalf("config/step/digest differ: %+v %d %s", got.Config(), got.Step(), got.Digest())
		}
		if !slices.Equal(got.p.flat, m.p.flat) {
			t.Fatal("weights differ after round trip")
		}
		if withOpt != (got.opt != nil) {
			t.Fatalf("optimizer state present = %v, want %v", got.opt != nil, withOpt)
		}
		if withOpt && (!slices.Equal(got.opt.m, m.opt.m) || !slices.Equal(got.opt.v, m.opt.v)) {
			t.Fatal("optimizer state differs after round trip")
		}
		// Saving what was loaded gives the same bytes.
		var a, b bytes.Buffer
		if err := m.EncodeCheckpoint(&a, withOpt); err != nil {
			t.Fatal(err)
		}
		if err := got.EncodeCheckpoint(&b, withOpt); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatal("re-encoded checkpoint differs")
		}
	}
	if m.Digest() == newTestModel(t, smallCfg, 10).Digest() {
		t.Error("different weights, same digest")
	}
}

func TestCheckpointCorrupt(t *testing.T) {
	m := trainedModel(t)
	var buf bytes.Buffer
	if err := m.EncodeCheckpoint(&buf, true); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	hl := 12 + int(binary.LittleEndian.Uint32(good[8:]))
	flip := func(i int) []byte { b := slices.Clone(good); b[i] ^= 0x10; return b }
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"magic", flip(0)},
		{"header length", flip(9)},
		{"header", flip(20)},
		{"step in header", bytes.Replace(good, []byte(`"step":1`), []byte(`"step":2`), 1)},
		{"first weight", flip(hl + 1)},
		{"last moment", flip(len(good) - 40)},
		{"trailer", flip(len(good) - 1)},
		{"truncated header", good[:30]},
		{"truncated payload", good[:len(good)/2]},
		{"truncated trailer", good[:len(good)-1]},
		{"trailing bytes", append(slices.Clone(good), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".ckpt")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load = %v, want ErrCorrupt naming %s", err, path)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "missing.ckpt")); err == nil || !strings.Contains(err.Error(), "missing.ckpt") {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	m, err := New(Config{Vocab: 5, Layers: 1, DModel: 4, Heads: 2, DFF: 4, Context: 4}, 1)
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.EncodeCheckpoint(&buf, false); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:40])
	f.Add([]byte(checkpointMagic + "\x02\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeCheckpoint(b)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := got.EncodeCheckpoint(&out, true); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), b) {
			t.Fatal("a checkpoint that decodes does not re-encode to the same bytes")
		}
	})
}
