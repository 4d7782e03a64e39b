package storage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Input is one committed artifact a stage reads: its name within the stage
// (e.g. "tasks"), the key of the input's _MANIFEST.json and the digest of
// that manifest's bytes.
type Input struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Digest string `json:"digest"`
}

// Identity is what a stage execution is a function of. It is hashed before
// anything runs: two executions with the same InputDigest are the same
// computation, and a committed one makes the other a no-op.
type Identity struct {
	Run          string          `json:"run"`
	Stage        string          `json:"stage"`
	Position     string          `json:"position"`
	Inputs       []Input         `json:"inputs"`
	Config       json.RawMessage `json:"config"` // canonical JSON
	ConfigDigest string          `json:"config_digest"`
	Seed         int64           `json:"seed"`
	Shards       int             `json:"shards"`
	InputDigest  string          `json:"input_digest"`
}

// NewIdentity validates a stage execution's parameters and computes its
// config and input digests. Inputs are sorted by name: their order does not
// change the identity. The run is recorded but not hashed, so a copied run
// keeps its digests.
func NewIdentity(run, position, stage string, inputs []Input, config any, seed int64, shards int) (Identity, error) {
	if err := CheckRun(run); err != nil {
		return Identity{}, err
	}
	if err := CheckSegment("position", position); err != nil {
		return Identity{}, err
	}
	if err := CheckStage(stage); err != nil {
		return Identity{}, err
	}
	if shards < 1 || shards > MaxShards {
		return Identity{}, fmt.Errorf("stage %s at %s: shards must be 1 to %d, not %d", stage, position, MaxShards, shards)
	}
	in := append([]Input(nil), inputs...)
	sort.Slice(in, func(i, j int) bool { return in[i].Name < in[j].Name })
	for i, x := range in {
		if x.Name == "" {
			return Identity{}, fmt.Errorf("stage %s at %s: input %d has no name", stage, position, i)
		}
		if i > 0 && in[i-1].Name == x.Name {
			return Identity{}, fmt.Errorf("stage %s at %s: input %q given twice", stage, position, x.Name)
		}
		if err := checkDigest(x.Digest); err != nil {
			return Identity{}, fmt.Errorf("stage %s at %s: input %s: %w", stage, position, x.Name, err)
		}
	}
	cfg, err := CanonicalJSON(config)
	if err != nil {
		return Identity{}, fmt.Errorf("stage %s at %s: encode config: %w", stage, position, err)
	}
	id := Identity{Run: run, Stage: stage, Position: position, Inputs: in, Config: cfg,
		ConfigDigest: DigestBytes(cfg), Seed: seed, Shards: shards}
	id.InputDigest, err = id.digest()
	if err != nil {
		return Identity{}, err
	}
	return id, nil
}

// digest is sha256 of the canonical JSON of {stage, position, inputs'
// names and digests, config digest, seed, shards}.
func (id Identity) digest() (string, error) {
	type in struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
	}
	ins := make([]in, len(id.Inputs))
	for i, x := range id.Inputs {
		ins[i] = in{x.Name, x.Digest}
	}
	c, err := CanonicalJSON(struct {
		Stage        string `json:"stage"`
		Position     string `json:"position"`
		Inputs       []in   `json:"inputs"`
		ConfigDigest string `json:"config_digest"`
		Seed         int64  `json:"seed"`
		Shards       int    `json:"shards"`
	}{id.Stage, id.Position, ins, id.ConfigDigest, id.Seed, id.Shards})
	if err != nil {
		return "", fmt.Errorf("digest identity of %s at %s: %w", id.Stage, id.Position, err)
	}
	return DigestBytes(c), nil
}

// check verifies that a decoded identity is internally consistent: its
// input digest is what its fields hash to. Indented files hold the config
// re-indented, so it is brought back to canonical form first.
func (id *Identity) check() error {
	if err := CheckSegment("position", id.Position); err != nil {
		return err
	}
	if err := CheckStage(id.Stage); err != nil {
		return err
	}
	if id.Shards < 1 || id.Shards > MaxShards {
		return fmt.Errorf("shards %d out of range", id.Shards)
	}
	if len(id.Config) > 0 {
		c, err := CanonicalJSON(id.Config)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		id.Config = c
	}
	if got := DigestBytes(id.Config); len(id.Config) > 0 && got != id.ConfigDigest {
		return fmt.Errorf("config_digest is %s but the config hashes to %s", id.ConfigDigest, got)
	}
	d, err := id.digest()
	if err != nil {
		return err
	}
	if d != id.InputDigest {
		return fmt.Errorf("input_digest is %s but the identity hashes to %s", id.InputDigest, d)
	}
	return nil
}

// Diff lists, for people, how id differs from was: "input tasks:
// sha256:1a2b… → sha256:3c4d…", "config.threshold: 0.5 → 0.7", "seed: 1 → 2".
func (id Identity) Diff(was Identity) []string {
	var out []string
	old := map[string]Input{}
	for _, x := range was.Inputs {
		old[x.Name] = x
	}
	cur := map[string]bool{}
	for _, x := range id.Inputs {
		cur[x.Name] = true
		o, ok := old[x.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("input %s: added (%s)", x.Name, x.Key))
		case o.Digest != x.Digest:
			where := ""
			if o.Key != x.Key {
				where = fmt.Sprintf(" (%s → %s)", o.Key, x.Key)
			}
			out = append(out, fmt.Sprintf("input %s: %s → %s%s", x.Name, short(o.Digest), short(x.Digest), where))
		}
	}
	for _, x := range was.Inputs {
		if !cur[x.Name] {
			out = append(out, fmt.Sprintf("input %s: removed (was %s)", x.Name, x.Key))
		}
	}
	if id.ConfigDigest != was.ConfigDigest {
		n := len(out)
		diffJSON(decodeGeneric(was.Config), decodeGeneric(id.Config), "config", &out)
		if len(out) == n {
			out = append(out, fmt.Sprintf("config: %s → %s", short(was.ConfigDigest), short(id.ConfigDigest)))
		}
	}
	if id.Seed != was.Seed {
		out = append(out, fmt.Sprintf("seed: %d → %d", was.Seed, id.Seed))
	}
	if id.Shards != was.Shards {
		out = append(out, fmt.Sprintf("shards: %d → %d", was.Shards, id.Shards))
	}
	if len(out) == 0 && id.InputDigest != was.InputDigest {
		out = append(out, fmt.Sprintf("input digest: %s → %s", short(was.InputDigest), short(id.InputDigest)))
	}
	return out
}

func decodeGeneric(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	return v
}

func diffJSON(a, b any, p string, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			diffJSON(am[k], bm[k], p+"."+k, out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diffJSON(al[i], bl[i], fmt.Sprintf("%s[%d]", p, i), out)
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		*out = append(*out, fmt.Sprintf("%s: %s → %s", p, clip(ja), clip(jb)))
	}
}

func clip(b []byte) string {
	if b == nil || string(b) == "null" {
		return "(unset)"
	}
	if len(b) > 48 {
		return string(b[:45]) + "…"
	}
	return string(b)
}
