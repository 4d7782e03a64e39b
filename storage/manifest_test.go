package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Storage checks only that a position is a safe path segment; the grammar
// of positions is pipeline/schedule's (its ParsePosition tests hold the
// rejections of grammatically wrong positions).
func TestCheckSegment(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string // "" when in is a safe segment
	}{
		{in: "r003-w02"},
		{in: "r001-h04"},
		{in: "r002-wt"},
		{in: "r000-t"},
		{in: "r1234-w100"},
		// Not what the planner writes, but safe as a segment: storage
		// has no say.
		{in: "r002-t"},
		{in: "r0001-w01"},
		{in: "r3-w02"},
		{in: "R003-w02"},
		{in: "r003.w02"},
		{in: "tasks-train"},
		{in: "import"},
		{in: "a.b"},
		{in: "x_y~z"},
		{in: strings.Repeat("a", MaxSegment)},
		{in: "", wantErr: "it is empty"},
		{in: "../x", wantErr: "contains '/'"},
		{in: "a/b", wantErr: "contains '/'"},
		{in: "/a", wantErr: "contains '/'"},
		{in: "..", wantErr: `contains ".."`},
		{in: "a..b", wantErr: `contains ".."`},
		{in: ".hidden", wantErr: "starts with '.'"},
		{in: ".whale-tmp", wantErr: "starts with '.'"},
		{in: "a b", wantErr: "not printable ASCII"},
		{in: "a\tb", wantErr: "not printable ASCII"},
		{in: "a\x00", wantErr: "not printable ASCII"},
		{in: "caf\u00e9", wantErr: "not printable ASCII"},
		{in: strings.Repeat("a", MaxSegment+1), wantErr: "bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			err := CheckSegment("position", tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckSegment(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckSegment(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
			// The message names the bad value and what is wanted.
			for _, s := range []string{"invalid position", fmt.Sprintf("%q", tt.in), "want one path segment"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("CheckSegment(%q) = %q, want it to say %q", tt.in, err, s)
				}
			}
		})
	}
}

func TestParseFolder(t *testing.T) {
	tests := []struct {
		in      string
		want    Folder
		wantErr bool
	}{
		{in: "r003-w02-rollout", want: Folder{"r003-w02", "rollout", 1}},
		{in: "r003-w02-rollout.a2", want: Folder{"r003-w02", "rollout", 2}},
		{in: "r002-t-evaluate.a17", want: Folder{"r002-t", "evaluate", 17}},
		{in: "r002-ht-evaluate", want: Folder{"r002-ht", "evaluate", 1}},
		{in: "tasks-train-import", want: Folder{"tasks-train", "import", 1}},
		{in: "r003-w02-rollout.a1", wantErr: true},
		{in: "r003-w02-rollout.a02", wantErr: true},
		{in: "r003-w02-rollout.b2", wantErr: true},
		{in: "r003-w02-rollout.a2.tmp", wantErr: true},
		{in: "r003-w02-roll2", wantErr: true},
		{in: "rollout", wantErr: true},
		{in: "r003-w02-", wantErr: true},
		{in: "_parts", wantErr: true},
		{in: "v1.2-rollout.a3", want: Folder{"v1.2", "rollout", 3}},
		{in: "r002-t-x-evaluate", want: Folder{"r002-t-x", "evaluate", 1}},
		{in: ".hidden-rollout", wantErr: true},
		{in: "a..b-rollout", wantErr: true},
		{in: "-rollout", wantErr: true},
		{in: "a b-rollout", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseFolder(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseFolder(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseFolder(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

// Every safe segment is one segment, and a stage folder made from it
// parses back to the same position, stage and attempt.
func FuzzCheckSegment(f *testing.F) {
	for _, s := range []string{"r003-w02", "r002-t", "tasks-train", "r3-w2", "r003.w02", "", "a-b-c", "../x", ".a", "a.a2-x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckSegment("position", s) != nil {
			return
		}
		if strings.Contains(s, "/") || strings.Contains(s, "..") || strings.HasPrefix(s, ".") || s == "" {
			t.Fatalf("CheckSegment accepted %q", s)
		}
		for _, want := range []Folder{{s, "rollout", 1}, {s, "evaluate", 12}} {
			got, err := ParseFolder(want.String())
			if err != nil || got != want {
				t.Fatalf("ParseFolder(%q) = %+v, %v; want %+v", want.String(), got, err, want)
			}
		}
	})
}

func FuzzParseFolder(f *testing.F) {
	for _, s := range []string{"r003-w02-rollout", "r003-w02-rollout.a2", "tasks-import.a10", "x.a", "-a", "a-b.a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fo, err := ParseFolder(s)
		if err != nil {
			return
		}
		if fo.String() != s {
			t.Fatalf("ParseFolder(%q).String() = %q", s, fo.String())
		}
		if fo.Attempt < 1 {
			t.Fatalf("ParseFolder(%q): attempt %d", s, fo.Attempt)
		}
	})
}

func TestCanonicalJSON(t *testing.T) {
	type cfg struct {
		B     int               `json:"b"`
		A     string            `json:"a"`
		M     map[string]string `json:"m"`
		Big   int64             `json:"big"`
		Float float64           `json:"float"`
	}
	v := cfg{B: 1, A: "<x>", M: map[string]string{"z": "1", "y": "2"}, Big: 1<<62 + 1, Float: 0.5}
	got, err := CanonicalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":"<x>","b":1,"big":4611686018427387905,"float":0.5,"m":{"y":"2","z":"1"}}`
	if string(got) != want {
		t.Fatalf("CanonicalJSON = %s\nwant %s", got, want)
	}
	// The same value as a generic map, as a decoded config file gives it.
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(want))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	got2, err := CanonicalJSON(m)
	if err != nil || string(got2) != want {
		t.Fatalf("CanonicalJSON(map) = %s, %v", got2, err)
	}
}

func TestNewIdentity(t *testing.T) {
	in := []Input{{Name: "tasks", Key: "a/_MANIFEST.json", Digest: DigestBytes([]byte("a"))},
		{Name: "model", Key: "b/_MANIFEST.json", Digest: DigestBytes([]byte("b"))}}
	base, err := NewIdentity("run", "r001-w01", "rollout", in, map[string]any{"k": 1}, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	if base.Inputs[0].Name != "model" {
		t.Fatalf("inputs not sorted: %+v", base.Inputs)
	}
	reordered, _ := NewIdentity("other-run", "r001-w01", "rollout", []Input{in[1], in[0]}, map[string]any{"k": 1}, 7, 2)
	if reordered.InputDigest != base.InputDigest {
		t.Fatalf("input order or run changed the digest")
	}
	changed := []struct {
		name string
		id   func() (Identity, error)
		diff string
	}{
		{"position", func() (Identity, error) {
			return NewIdentity("run", "r001-w02", "rollout", in, map[string]any{"k": 1}, 7, 2)
		}, ""},
		{"stage", func() (Identity, error) {
			return NewIdentity("run", "r001-w01", "filter", in, map[string]any{"k": 1}, 7, 2)
		}, ""},
		{"config", func() (Identity, error) {
			return NewIdentity("run", "r001-w01", "rollout", in, map[string]any{"k": 2}, 7, 2)
		}, "config.k: 1 → 2"},
		{"seed", func() (Identity, error) {
			return NewIdentity("run", "r001-w01", "rollout", in, map[string]any{"k": 1}, 8, 2)
		}, "seed: 7 → 8"},
		{"shards", func() (Identity, error) {
			return NewIdentity("run", "r001-w01", "rollout", in, map[string]any{"k": 1}, 7, 3)
		}, "shards: 2 → 3"},
		{"input", func() (Identity, error) {
			in2 := append([]Input(nil), in...)
			in2[0].Digest = DigestBytes([]byte("c"))
			return NewIdentity("run", "r001-w01", "rollout", in2, map[string]any{"k": 1}, 7, 2)
		}, "input tasks: sha256:"},
		{"input removed", func() (Identity, error) {
			return NewIdentity("run", "r001-w01", "rollout", in[:1], map[string]any{"k": 1}, 7, 2)
		}, "input model: removed"},
	}
	for _, c := range changed {
		t.Run(c.name, func(t *testing.T) {
			id, err := c.id()
			if err != nil {
				t.Fatal(err)
			}
			if id.InputDigest == base.InputDigest {
				t.Fatalf("changing the %s kept the input digest", c.name)
			}
			d := strings.Join(id.Diff(base), "; ")
			if !strings.Contains(d, c.diff) {
				t.Fatalf("Diff = %q, want it to mention %q", d, c.diff)
			}
		})
	}
	bad := []struct {
		name string
		err  func() error
	}{
		{"dup input", func() error {
			_, err := NewIdentity("run", "r001-w01", "rollout", []Input{in[0], in[0]}, nil, 0, 1)
			return err
		}},
		{"bad digest", func() error {
			_, err := NewIdentity("run", "r001-w01", "rollout", []Input{{Name: "x", Digest: "md5:1"}}, nil, 0, 1)
			return err
		}},
		{"zero shards", func() error { _, err := NewIdentity("run", "r001-w01", "rollout", nil, nil, 0, 0); return err }},
		{"bad stage", func() error { _, err := NewIdentity("run", "r001-w01", "roll-out", nil, nil, 0, 1); return err }},
		{"bad run", func() error { _, err := NewIdentity("../x", "r001-w01", "rollout", nil, nil, 0, 1); return err }},
		{"bad position", func() error { _, err := NewIdentity("run", "../x", "rollout", nil, nil, 0, 1); return err }},
		{"hidden position", func() error { _, err := NewIdentity("run", ".x", "rollout", nil, nil, 0, 1); return err }},
		{"bad config", func() error {
			_, err := NewIdentity("run", "r001-w01", "rollout", nil, map[string]any{"f": func() {}}, 0, 1)
			return err
		}},
	}
	for _, b := range bad {
		if b.err() == nil {
			t.Errorf("%s: NewIdentity accepted it", b.name)
		}
	}
}

func TestDecodeManifestRejectsTampering(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	m := commitSimple(t, s, "run", "r001-w01", "rollout", map[string]any{"n": 1}, 1)
	data, err := s.ReadAll(ctx, m.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeManifest(data); err != nil {
		t.Fatalf("a committed manifest does not decode: %v", err)
	}
	tampered := []struct{ from, to, wantErr string }{
		{`"seed": 1`, `"seed": 2`, "input_digest"},
		{`"format": "whale.manifest/v1"`, `"format": "whale.manifest/v9"`, "format"},
		{`"n": 1`, `"n": 2`, "config_digest"},
	}
	for _, tt := range tampered {
		bad := strings.Replace(string(data), tt.from, tt.to, 1)
		if bad == string(data) {
			t.Fatalf("%q not in manifest:\n%s", tt.from, data)
		}
		if _, err := DecodeManifest([]byte(bad)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("tampered %s: err = %v, want it to mention %q", tt.from, err, tt.wantErr)
		}
	}
	// A manifest copied into another folder does not pass for that folder.
	if err := s.WriteAll(ctx, "runs/run/stages/r001-w02-rollout/"+ManifestName, data); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(ctx, s, "runs/run/stages/r001-w02-rollout"); err == nil || !strings.Contains(err.Error(), "copied") {
		t.Fatalf("ReadManifest of a copied manifest: %v", err)
	}
	if _, err := ReadManifest(ctx, s, "runs/run/stages/r009-w01-rollout"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadManifest of nothing: %v, want ErrNotFound", err)
	}
}
