package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names inside a stage folder. Everything else in a folder is a data file,
// and counts only when a committed manifest names it.
const (
	ManifestName = "_MANIFEST.json" // the commit point, written last
	InputsName   = "_INPUTS.json"   // the attempt's identity, written first
	PartsDir     = "_parts"         // one part manifest per committed shard
)

// Format tags written into every protocol file; a reader refuses a major
// version it does not know instead of misreading it.
const (
	manifestFormat = "whale.manifest/v1"
	partFormat     = "whale.part/v1"
	inputsFormat   = "whale.inputs/v1"
)

// MaxShards is the most shards a stage may run as: shard numbers are
// written with five digits so that names sort.
const MaxShards = 99999

var (
	runRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	positionRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	roundPosRE = regexp.MustCompile(`^r([0-9]+)-(?:([wh])([0-9]+)|([wh]?t))$`)
	roundishRE = regexp.MustCompile(`^r[0-9]+-`)
	stageRE    = regexp.MustCompile(`^[a-z]+$`)
	tableRE    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	extRE      = regexp.MustCompile(`^[a-z0-9]+$`)
	partNameRE = regexp.MustCompile(`^([0-9]{5})-of-([0-9]{5})\.json$`)
)

// CheckRun reports whether name can be a run name in a key.
func CheckRun(name string) error {
	if !runRE.MatchString(name) {
		return fmt.Errorf("invalid run name %q: want letters, digits, '-' or '_' (at most 128)", name)
	}
	return nil
}

// CheckStage reports whether name is a valid stage name (lowercase letters).
func CheckStage(name string) error {
	if len(name) > 32 || !stageRE.MatchString(name) {
		return fmt.Errorf("invalid stage name %q: want 1 to 32 lowercase letters", name)
	}
	return nil
}

// Phases of a round position.
const (
	PhaseWeight  = 'w' // a weight step: rollout → filter → finetune
	PhaseHarness = 'h' // a harness iteration: propose → evaluate
	PhaseTest    = 't' // the final test evaluation of a phase
)

// Position says where in an experiment a stage runs: "r003-w02" (round 3,
// weight step 2), "r001-h04" (harness iteration 4), "r002-wt" and "r002-ht"
// (the test evaluations after round 2's weight and harness phases),
// "r000-t" (the test of the initial pair) or "r002-t", or a free-form name
// such as "tasks-train" for imported data (Round 0, Phase 0).
type Position struct {
	Round int
	Phase byte // PhaseWeight, PhaseHarness, PhaseTest, or 0 for a free-form name
	Index int  // weight step or harness iteration, from 1; 0 for PhaseTest
	// After is the phase a test follows (PhaseWeight or PhaseHarness), or 0.
	After byte
	Name  string
}

// String renders the position as it appears in folder names.
func (p Position) String() string {
	switch p.Phase {
	case PhaseWeight, PhaseHarness:
		return fmt.Sprintf("r%03d-%c%02d", p.Round, p.Phase, p.Index)
	case PhaseTest:
		if p.After != 0 {
			return fmt.Sprintf("r%03d-%ct", p.Round, p.After)
		}
		return fmt.Sprintf("r%03d-t", p.Round)
	}
	return p.Name
}

// ParsePosition parses and validates a position. Free-form names use
// lowercase letters, digits and single dashes, and may not start like a
// round position ("r<digits>-") without being one.
func ParsePosition(s string) (Position, error) {
	if len(s) > 64 || !positionRE.MatchString(s) {
		return Position{}, fmt.Errorf("invalid position %q: want e.g. r003-w02, r001-h04, r002-wt or a name of lowercase letters, digits and dashes (no dots)", s)
	}
	if m := roundPosRE.FindStringSubmatch(s); m != nil {
		round, _ := strconv.Atoi(m[1])
		if m[4] == "t" && round == 0 && len(m[1]) == 3 {
			return Position{Phase: PhaseTest}, nil // the initial pair's test
		}
		if round < 1 || len(m[1]) < 3 {
			return Position{}, fmt.Errorf("invalid position %q: the round is written with at least three digits, from r001", s)
		}
		if m[4] != "" {
			p := Position{Round: round, Phase: PhaseTest}
			if len(m[4]) == 2 {
				p.After = m[4][0]
			}
			return p, nil
		}
		idx, _ := strconv.Atoi(m[3])
		if idx < 1 || len(m[3]) < 2 {
			return Position{}, fmt.Errorf("invalid position %q: the step is written with at least two digits, from 01", s)
		}
		return Position{Round: round, Phase: m[2][0], Index: idx}, nil
	}
	if roundishRE.MatchString(s) {
		return Position{}, fmt.Errorf("invalid position %q: it starts like a round position but is not r<round>-w<step>, r<round>-h<iteration>, r<round>-wt, r<round>-ht or r<round>-t", s)
	}
	return Position{Name: s}, nil
}

// CheckPosition validates a position string.
func CheckPosition(s string) error {
	_, err := ParsePosition(s)
	return err
}

// Folder names one attempt of one stage at one position:
// "<position>-<stage>" for attempt 1, "<position>-<stage>.a<N>" for N ≥ 2.
type Folder struct {
	Position string
	Stage    string
	Attempt  int // from 1
}

// String is the folder's name under runs/<run>/stages/.
func (f Folder) String() string {
	if f.Attempt <= 1 {
		return f.Position + "-" + f.Stage
	}
	return fmt.Sprintf("%s-%s.a%d", f.Position, f.Stage, f.Attempt)
}

// Key is the folder's key under the root, without a trailing slash.
func (f Folder) Key(run string) string { return StagesPrefix(run) + f.String() }

// ParseFolder parses a folder name such as "r003-w02-rollout.a2". Stage
// names have no dashes, so the stage is what follows the last dash.
func ParseFolder(name string) (Folder, error) {
	base, attempt := name, 1
	if i := strings.IndexByte(name, '.'); i >= 0 {
		base = name[:i]
		suffix := name[i+1:]
		n, err := strconv.Atoi(strings.TrimPrefix(suffix, "a"))
		if !strings.HasPrefix(suffix, "a") || err != nil || n < 2 || strconv.Itoa(n) != suffix[1:] {
			return Folder{}, fmt.Errorf("invalid stage folder %q: the attempt suffix must be .a<N> with N ≥ 2", name)
		}
		attempt = n
	}
	i := strings.LastIndexByte(base, '-')
	if i < 0 {
		return Folder{}, fmt.Errorf("invalid stage folder %q: want <position>-<stage>", name)
	}
	f := Folder{Position: base[:i], Stage: base[i+1:], Attempt: attempt}
	if err := CheckPosition(f.Position); err != nil {
		return Folder{}, fmt.Errorf("invalid stage folder %q: %w", name, err)
	}
	if err := CheckStage(f.Stage); err != nil {
		return Folder{}, fmt.Errorf("invalid stage folder %q: %w", name, err)
	}
	return f, nil
}

// StagesPrefix is the key prefix of a run's stage folders, ending in "/".
func StagesPrefix(run string) string { return "runs/" + run + "/stages/" }

// PartFileName names a data file: "<table>-<shard>-of-<shards>.<token>.<ext>",
// with ".<seq>" before the extension for the second and later file of one
// table in one try. The token is random per try, so a requeued shard never
// overwrites what an earlier try uploaded.
func PartFileName(table string, shard, shards int, token string, seq int, ext string) string {
	if seq > 0 {
		return fmt.Sprintf("%s-%05d-of-%05d.%s.%d.%s", table, shard, shards, token, seq, ext)
	}
	return fmt.Sprintf("%s-%05d-of-%05d.%s.%s", table, shard, shards, token, ext)
}

// PartManifestName is the key, relative to the stage folder, of shard's
// part manifest.
func PartManifestName(shard, shards int) string {
	return fmt.Sprintf("%s/%05d-of-%05d.json", PartsDir, shard, shards)
}

// DigestBytes returns "sha256:<hex>" of b.
func DigestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func checkDigest(d string) error {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return fmt.Errorf("invalid digest %q: want sha256:<64 hex digits>", d)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return fmt.Errorf("invalid digest %q: want sha256:<64 hex digits>", d)
	}
	return nil
}

// CanonicalJSON encodes v as compact JSON with every object's keys sorted,
// so that equal values hash equally however they were built (a struct, a
// map decoded from YAML, the same value read back from a manifest).
// Integers keep their exact text.
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

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
	if err := CheckPosition(position); err != nil {
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
	if err := CheckPosition(id.Position); err != nil {
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

func short(d string) string {
	if h, ok := strings.CutPrefix(d, "sha256:"); ok && len(h) > 12 {
		return "sha256:" + h[:12] + "…"
	}
	return d
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

// FileEntry is one data file of a stage, as its part manifest and the
// stage manifest record it.
type FileEntry struct {
	Name   string `json:"name"`   // relative to the stage folder
	Table  string `json:"table"`  // e.g. "rollouts"
	Shard  int    `json:"shard"`  // the shard that wrote it
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // "sha256:<hex>" of the bytes
	Rows   int64  `json:"rows"`   // as the writer reported
}

// PartManifest is the commit record of one shard, written with
// CreateExclusive at _parts/<shard>-of-<shards>.json.
type PartManifest struct {
	Format       string         `json:"format"`
	Run          string         `json:"run"`
	Position     string         `json:"position"`
	Stage        string         `json:"stage"`
	Attempt      int            `json:"attempt"`
	Shard        int            `json:"shard"`
	Shards       int            `json:"shards"`
	InputDigest  string         `json:"input_digest"`
	Token        string         `json:"token"`
	Files        []FileEntry    `json:"files"`
	Summary      map[string]any `json:"summary,omitempty"`
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	Host         string         `json:"host,omitempty"`
	WhaleVersion string         `json:"whale_version,omitempty"`
}

// PartInfo is what the stage manifest keeps of each part manifest.
type PartInfo struct {
	Shard        int            `json:"shard"`
	Token        string         `json:"token"`
	Files        int            `json:"files"`
	Rows         int64          `json:"rows"`
	Summary      map[string]any `json:"summary,omitempty"`
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	Host         string         `json:"host,omitempty"`
	WhaleVersion string         `json:"whale_version,omitempty"`
}

// Manifest is a committed stage: the contents of its _MANIFEST.json. Only
// files it names are part of the result.
type Manifest struct {
	Format string `json:"format"`
	Identity
	Attempt      int            `json:"attempt"`
	Files        []FileEntry    `json:"files"`
	Parts        []PartInfo     `json:"parts"`
	Summary      map[string]any `json:"summary,omitempty"` // the merged per-shard summaries
	Started      time.Time      `json:"started"`           // when the attempt began (its _INPUTS.json)
	Finished     time.Time      `json:"finished"`          // when it was committed
	WhaleVersion string         `json:"whale_version,omitempty"`

	// Set by the reader, not stored.
	Dir    string `json:"-"` // key of the stage folder
	Key    string `json:"-"` // key of this _MANIFEST.json
	Digest string `json:"-"` // sha256 of its bytes: what a consumer records as its input
}

// Folder is the stage folder the manifest commits.
func (m *Manifest) Folder() Folder {
	return Folder{Position: m.Position, Stage: m.Stage, Attempt: m.Attempt}
}

// AsInput is the reference a stage that reads m records.
func (m *Manifest) AsInput(name string) Input {
	return Input{Name: name, Key: m.Key, Digest: m.Digest}
}

// FileKey is the key of one of the manifest's files.
func (m *Manifest) FileKey(f FileEntry) string { return m.Dir + "/" + f.Name }

// Table returns the files of one table, in shard order.
func (m *Manifest) Table(table string) []FileEntry {
	var out []FileEntry
	for _, f := range m.Files {
		if f.Table == table {
			out = append(out, f)
		}
	}
	return out
}

// Rows is the total row count of a table.
func (m *Manifest) Rows(table string) int64 {
	var n int64
	for _, f := range m.Table(table) {
		n += f.Rows
	}
	return n
}

// OpenFile gives random access to a committed file. A size that differs
// from the manifest's means the file was replaced after commit; that is
// an error rather than a silently different result.
func (m *Manifest) OpenFile(ctx context.Context, s *Store, f FileEntry) (*ReaderAt, error) {
	r, err := s.OpenReaderAt(ctx, m.FileKey(f))
	if err != nil {
		return nil, fmt.Errorf("open %s of %s: %w", f.Name, m.Dir, err)
	}
	if r.Size() != f.Size {
		return nil, fmt.Errorf("open %s: size is %d bytes but %s records %d: the file changed after commit", m.FileKey(f), r.Size(), ManifestName, f.Size)
	}
	return r, nil
}

// NewFileReader streams a committed file.
func (m *Manifest) NewFileReader(ctx context.Context, s *Store, f FileEntry) (io.ReadCloser, error) {
	return s.NewReader(ctx, m.FileKey(f))
}

// DecodeManifest parses and checks a _MANIFEST.json.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("format %q is not %q (written by a newer whale?)", m.Format, manifestFormat)
	}
	if m.Attempt < 1 {
		return nil, fmt.Errorf("attempt %d out of range", m.Attempt)
	}
	if err := m.Identity.check(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if f.Name == "" || strings.Contains(f.Name, "/") || seen[f.Name] {
			return nil, fmt.Errorf("bad or repeated file name %q", f.Name)
		}
		seen[f.Name] = true
	}
	m.Digest = DigestBytes(data)
	return &m, nil
}

// ReadManifest reads the manifest of the stage folder at dir (a key such as
// runs/x/stages/r003-w02-rollout). A folder that is not committed gives an
// error that errors.Is(err, ErrNotFound).
func ReadManifest(ctx context.Context, s *Store, dir string) (*Manifest, error) {
	dir = strings.TrimSuffix(dir, "/")
	key := dir + "/" + ManifestName
	data, err := s.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	if got := m.Folder().String(); got != path.Base(dir) {
		return nil, fmt.Errorf("read manifest %s: it commits folder %s, not %s: was it copied?", key, got, path.Base(dir))
	}
	m.Dir, m.Key = dir, key
	return m, nil
}

// listAttempts returns the attempt folders of one position and stage, in
// ascending attempt order. One list request.
func listAttempts(ctx context.Context, s *Store, run, position, stage string) ([]Folder, error) {
	prefix := StagesPrefix(run) + position + "-" + stage
	var out []Folder
	err := s.List(ctx, prefix, true, func(e Entry) error {
		if !e.IsDir {
			return nil
		}
		f, err := ParseFolder(path.Base(strings.TrimSuffix(e.Key, "/")))
		if err == nil && f.Position == position && f.Stage == stage {
			out = append(out, f)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of %s-%s in run %s: %w", position, stage, run, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Attempt < out[j].Attempt })
	return out, nil
}

// LatestCommitted returns the current result of a stage at a position: the
// committed attempt with the highest number. With no committed attempt the
// error errors.Is(err, ErrNotFound). Cost: one list and one read (plus one
// read per newer uncommitted attempt).
func LatestCommitted(ctx context.Context, s *Store, run, position, stage string) (*Manifest, error) {
	fs, err := listAttempts(ctx, s, run, position, stage)
	if err != nil {
		return nil, err
	}
	for i := len(fs) - 1; i >= 0; i-- {
		m, err := ReadManifest(ctx, s, fs[i].Key(run))
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s-%s in run %s has no committed attempt: %w", position, stage, run, ErrNotFound)
}

// folderScan is what one recursive listing of a run's stages says about
// each stage folder.
type folderScan struct {
	folder    Folder
	dir       string
	committed bool
	objects   []Entry
	newest    time.Time
}

func scanRun(ctx context.Context, s *Store, run string) ([]*folderScan, error) {
	if err := CheckRun(run); err != nil {
		return nil, err
	}
	prefix := StagesPrefix(run)
	byDir := map[string]*folderScan{}
	var order []*folderScan
	err := s.List(ctx, prefix, false, func(e Entry) error {
		rest := strings.TrimPrefix(e.Key, prefix)
		name, inner, ok := strings.Cut(rest, "/")
		if !ok {
			return nil
		}
		f, err := ParseFolder(name)
		if err != nil {
			return nil // not ours: leave it alone
		}
		fsn := byDir[name]
		if fsn == nil {
			fsn = &folderScan{folder: f, dir: prefix + name}
			byDir[name] = fsn
			order = append(order, fsn)
		}
		if inner == ManifestName {
			fsn.committed = true
		}
		fsn.objects = append(fsn.objects, e)
		if e.ModTime.After(fsn.newest) {
			fsn.newest = e.ModTime
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list stages of run %s: %w", run, err)
	}
	return order, nil
}

// ListCommitted returns the current result of every stage of a run: for
// each position and stage, the manifest of its highest committed attempt,
// ordered by folder name. Folders without a _MANIFEST.json are invisible.
// Cost: one recursive listing plus one read per result.
func ListCommitted(ctx context.Context, s *Store, run string) ([]*Manifest, error) {
	scans, err := scanRun(ctx, s, run)
	if err != nil {
		return nil, err
	}
	latest := map[string]*folderScan{}
	for _, f := range scans {
		if !f.committed {
			continue
		}
		id := f.folder.Position + "-" + f.folder.Stage
		if cur := latest[id]; cur == nil || cur.folder.Attempt < f.folder.Attempt {
			latest[id] = f
		}
	}
	dirs := make([]string, 0, len(latest))
	for _, f := range latest {
		dirs = append(dirs, f.dir)
	}
	sort.Strings(dirs)
	out := make([]*Manifest, len(dirs))
	err = forEach(ctx, len(dirs), 8, func(ctx context.Context, i int) error {
		m, err := ReadManifest(ctx, s, dirs[i])
		out[i] = m
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// forEach runs fn for 0..n-1 with at most par at once and returns the
// first error; the others are cancelled.
func forEach(ctx context.Context, n, par int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if ctx.Err() != nil {
				return
			}
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}(i)
	}
	wg.Wait()
	return first
}

// VerifyError lists what is wrong with a committed stage's files.
type VerifyError struct {
	Dir      string
	Problems []string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("verify %s: %d problem(s): %s", e.Dir, len(e.Problems), strings.Join(e.Problems, "; "))
}

// Verify checks that every file the manifest names exists with the recorded
// size and, with checksums, the recorded sha256 (which reads every byte).
// Problems come back together as a *VerifyError.
func Verify(ctx context.Context, s *Store, m *Manifest, checksums bool) error {
	problems := make([]string, len(m.Files))
	err := forEach(ctx, len(m.Files), 8, func(ctx context.Context, i int) error {
		f := m.Files[i]
		key := m.FileKey(f)
		a, err := s.Stat(ctx, key)
		if errors.Is(err, ErrNotFound) {
			problems[i] = fmt.Sprintf("%s: missing", f.Name)
			return nil
		}
		if err != nil {
			return err
		}
		if a.Size != f.Size {
			problems[i] = fmt.Sprintf("%s: %d bytes, manifest says %d", f.Name, a.Size, f.Size)
			return nil
		}
		if !checksums {
			return nil
		}
		r, err := s.NewReader(ctx, key)
		if err != nil {
			return err
		}
		defer r.Close()
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			return fmt.Errorf("verify %s: %w", key, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			problems[i] = fmt.Sprintf("%s: content hashes to %s, manifest says %s", f.Name, short(got), short(f.SHA256))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify %s: %w", m.Dir, err)
	}
	var out []string
	for _, p := range problems {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return &VerifyError{Dir: m.Dir, Problems: out}
	}
	return nil
}

// Garbage lists the objects in a run's stage folders that no committed
// manifest names and that are older than olderThan: files uploaded by a
// try that crashed or lost its shard's commit race, and whole uncommitted
// attempts whose newest object is older than olderThan. It deletes
// nothing; a cleaner may delete what it returns. Pick olderThan well above
// the longest a shard may run, or a slow attempt still in progress would
// be listed.
func Garbage(ctx context.Context, s *Store, run string, olderThan time.Duration) ([]Entry, error) {
	scans, err := scanRun(ctx, s, run)
	if err != nil {
		return nil, err
	}
	cutoff := time.Now().Add(-olderThan)
	var out []Entry
	for _, f := range scans {
		if !f.committed {
			if f.newest.Before(cutoff) {
				out = append(out, f.objects...)
			}
			continue
		}
		m, err := ReadManifest(ctx, s, f.dir)
		if err != nil {
			return nil, err
		}
		named := map[string]bool{ManifestName: true, InputsName: true}
		for _, fe := range m.Files {
			named[fe.Name] = true
		}
		for _, e := range f.objects {
			inner := strings.TrimPrefix(e.Key, f.dir+"/")
			if named[inner] || strings.HasPrefix(inner, PartsDir+"/") {
				continue
			}
			if e.ModTime.Before(cutoff) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// SummaryNumber reads a number from a stage summary as storage decodes it
// (float64) or as a stage built it (int, int64); anything else is 0.
func SummaryNumber(summary map[string]any, key string) float64 {
	switch v := summary[key].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	return 0
}
