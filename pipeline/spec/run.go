package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Run is the content of run.json: the frozen, normalized spec of a run.
type Run struct {
	Spec Experiment `json:"spec"`
	// SpecDigest is "sha256:<hex>" of CanonicalJSON(Spec).
	SpecDigest   string    `json:"spec_digest"`
	WhaleVersion string    `json:"whale_version"`
	Created      time.Time `json:"created"`
	// Inputs are the files and directories outside the bucket that the
	// spec's path fields name, as init found them (see Input); none for a
	// run frozen before whale recorded them.
	Inputs []Input `json:"inputs,omitempty"`
	// Dir is the directory `whale init` ran in. The trainer and reload
	// commands (shell text that may name files by relative path, such as
	// python jobs/trainers/train.py) run there, wherever whale runs from;
	// empty for a run frozen before whale recorded it (they run in the
	// current directory).
	Dir string `json:"dir,omitempty"`
}

// ErrSpecMismatch is matched by the *MismatchError that CheckSame returns.
var ErrSpecMismatch = errors.New("spec differs from the run's frozen spec")

// MismatchError says that an existing run was initialized with another spec.
type MismatchError struct {
	Run    string
	Stored string // digest in run.json
	Given  string // digest of the spec given now
	Paths  []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("run %q exists with a different spec (%s, now %s); fields that differ: %s; choose a new run name or keep the old spec",
		e.Run, e.Stored, e.Given, strings.Join(e.Paths, ", "))
}

func (e *MismatchError) Is(target error) bool { return target == ErrSpecMismatch }

// Freeze normalizes and validates a copy of exp and returns the Run that
// run.json holds. now is recorded in UTC.
func Freeze(exp *Experiment, version string, now time.Time) (*Run, error) {
	e := exp.Clone()
	e.Normalize()
	if err := e.Validate(); err != nil {
		return nil, err
	}
	digest, err := Digest(e)
	if err != nil {
		return nil, err
	}
	return &Run{Spec: *e, SpecDigest: digest, WhaleVersion: version, Created: now.UTC()}, nil
}

// CheckSame returns nil when exp (normalized) is the spec frozen in run,
// and a *MismatchError naming the differing fields otherwise.
//
// The same digest settles it. Otherwise the stored spec, read into
// today's Experiment and normalized, is compared with exp: a run frozen by
// an older whale has no key for the fields added since, so its digest
// differs from today's for the very same file, yet it is the same
// experiment when those fields take their defaults in both.
func CheckSame(run *Run, exp *Experiment) error {
	return checkSame(run, run.Spec.Clone(), exp)
}

// checkSame is CheckSame with the stored spec given apart (a copy of
// run.Spec, which it normalizes).
func checkSame(run *Run, stored, exp *Experiment) error {
	e := exp.Clone()
	e.Normalize()
	digest, err := Digest(e)
	if err != nil {
		return err
	}
	if digest == run.SpecDigest {
		return nil
	}
	stored.Normalize()
	now, err := Digest(stored)
	if err != nil {
		return err
	}
	if now == digest {
		return nil
	}
	return &MismatchError{Run: run.Spec.Name, Stored: run.SpecDigest, Given: digest, Paths: Diff(stored, e)}
}

// Digest returns "sha256:<hex>" of CanonicalJSON(e). e is hashed as given;
// Freeze normalizes first.
func Digest(e *Experiment) (string, error) {
	c, err := CanonicalJSON(e)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalJSON is the form the digest is taken over: compact JSON with
// every object's keys sorted and numbers as encoding/json writes them. It is
// computed through a generic value so that the same bytes come out of the
// struct and out of the spec as stored in run.json.
func CanonicalJSON(e *Experiment) ([]byte, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	return canonicalize(raw)
}

func canonicalize(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep integers exact (seeds beyond 2^53)
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonicalize spec: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonicalize spec: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Encode renders run.json: indented for people, newline-terminated.
func (r *Run) Encode() ([]byte, error) {
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode run.json: %w", err)
	}
	return append(out, '\n'), nil
}

// DecodeRun parses run.json and checks that spec_digest matches the stored
// spec. Unknown fields are errors: a run.json from a newer whale must not be
// half-understood; fields it lacks (from an older whale) take Defaults'
// values. name is used in error messages.
func DecodeRun(name string, data []byte) (*Run, error) {
	var envelope struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(data, &envelope); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	// A run.json from an older whale has no keys for the fields added
	// since: they read as today's defaults, as they would from its YAML.
	r := Run{Spec: Defaults()}
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w (written by a newer whale?)", name, err)
	}
	if len(envelope.Spec) == 0 {
		return nil, fmt.Errorf("%s: no spec", name)
	}
	c, err := canonicalize(envelope.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sum := sha256.Sum256(c)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != r.SpecDigest {
		return nil, fmt.Errorf("%s: spec_digest is %s but the spec hashes to %s: the file was edited or damaged", name, r.SpecDigest, got)
	}
	return &r, nil
}

// Diff lists, sorted, the field paths (as in the YAML: "rsft.batch_size",
// "model.endpoints") where a and b differ. Lists of different lengths are
// reported as one path; numbers compare by value whatever their Go type, so
// a spec read from run.json and the same spec parsed from YAML have no diff.
func Diff(a, b *Experiment) []string {
	var out []string
	diffValues(generic(reflect.ValueOf(a).Elem()), generic(reflect.ValueOf(b).Elem()), "", &out)
	slices.Sort(out)
	return out
}

func diffValues(a, b any, path string, out *[]string) {
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	if aMap && bMap {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			diffValues(am[k], bm[k], joinPath(path, k), out)
		}
		return
	}
	al, aList := a.([]any)
	bl, bList := b.([]any)
	if aList && bList && len(al) == len(bl) {
		for i := range al {
			diffValues(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i), out)
		}
		return
	}
	if !leafEqual(a, b) {
		*out = append(*out, path)
	}
}

func leafEqual(a, b any) bool {
	af, aNum := a.(float64)
	bf, bNum := b.(float64)
	if aNum && bNum {
		return af == bf || math.IsNaN(af) && math.IsNaN(bf)
	}
	al, aList := a.([]any)
	bl, bList := b.([]any)
	if aList || bList {
		// Lists of equal length were compared element-wise; nil and an
		// empty list are the same in JSON.
		return aList && bList && len(al) == 0 && len(bl) == 0
	}
	return reflect.DeepEqual(a, b)
}

// generic turns a spec value into maps keyed by json name, lists and leaves,
// with every number as float64 (int64 beyond 2^53 keeps its exact text).
func generic(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Struct:
		m := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			m[name] = generic(v.Field(i))
		}
		return m
	case reflect.Map:
		if v.Len() == 0 {
			return map[string]any{}
		}
		m := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			m[fmt.Sprint(it.Key().Interface())] = generic(it.Value())
		}
		return m
	case reflect.Slice, reflect.Array:
		l := make([]any, v.Len())
		for i := range l {
			l[i] = generic(v.Index(i))
		}
		return l
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return generic(v.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return number(float64(v.Int()), strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return number(float64(v.Uint()), strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.String:
		if n, ok := v.Interface().(json.Number); ok {
			if f, err := n.Float64(); err == nil {
				return number(f, n.String())
			}
		}
		return v.String()
	}
	return v.Interface()
}

// number keeps integers that float64 cannot hold exactly as their text, so
// that two different large seeds never compare equal.
func number(f float64, text string) any {
	if math.Abs(f) >= 1<<53 {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return "int:" + strconv.FormatInt(i, 10)
		}
	}
	return f
}
