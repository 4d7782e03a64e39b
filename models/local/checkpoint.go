package local

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// checkpointMagic opens every checkpoint; the digit is the format version.
const checkpointMagic = "WHALELM1"

const maxHeaderBytes = 1 << 20

// ErrCorrupt is wrapped by every Load error about the bytes of a
// checkpoint (as opposed to failing to read it).
var ErrCorrupt = errors.New("corrupt checkpoint")

type header struct {
	Format        string       `json:"format"`
	Config        Config       `json:"config"`
	Tokenizer     string       `json:"tokenizer"`
	Step          int64        `json:"step"`
	DType         string       `json:"dtype"`
	Tensors       []tensorSpec `json:"tensors"`
	Optimizer     bool         `json:"optimizer"`
	PayloadBytes  int64        `json:"payload_bytes"`
	PayloadSHA256 string       `json:"payload_sha256"`
}

func floatsLE(dst []byte, src []float32) []byte {
	for _, v := range src {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// Digest is the hex SHA-256 of the weights as stored in a checkpoint; it
// names a model's exact weights.
func (m *Model) Digest() string {
	sum := sha256.Sum256(floatsLE(nil, m.p.flat))
	return hex.EncodeToString(sum[:])
}

// EncodeCheckpoint writes the checkpoint to w (see the package doc for the format).
// The optimiser state is included when withOptimizer is set and the model
// has one.
func (m *Model) EncodeCheckpoint(w io.Writer, withOptimizer bool) error {
	opt := withOptimizer && m.opt != nil
	n := len(m.p.flat)
	payload := make([]byte, 0, 4*n*3)
	payload = floatsLE(payload, m.p.flat)
	if opt {
		payload = floatsLE(payload, m.opt.m)
		payload = floatsLE(payload, m.opt.v)
	}
	psum := sha256.Sum256(payload)
	h := header{Format: "whale-local-model", Config: m.cfg, Tokenizer: TokenizerVersion, Step: m.step, DType: "float32",
		Tensors: m.cfg.layout(), Optimizer: opt, PayloadBytes: int64(len(payload)), PayloadSHA256: hex.EncodeToString(psum[:])}
	hj, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString(checkpointMagic)
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(hj))))
	buf.Write(hj)
	buf.Write(payload)
	fsum := sha256.Sum256(buf.Bytes())
	buf.Write(fsum[:])
	_, err = w.Write(buf.Bytes())
	return err
}

// Save writes the checkpoint to path atomically: a temporary file in the
// same folder, synced, then renamed over path.
func (m *Model) Save(path string, withOptimizer bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", path, err)
	}
	tmp := f.Name()
	err = m.EncodeCheckpoint(f, withOptimizer)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save checkpoint %s: %w", path, err)
	}
	return nil
}

// Load reads a checkpoint written by Save.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", path, err)
	}
	m, err := DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", path, err)
	}
	return m, nil
}

// DecodeCheckpoint parses a whole checkpoint. Every inconsistency — wrong magic,
// truncation, trailing bytes, a header that disagrees with its config, a
// digest mismatch — is an error wrapping ErrCorrupt.
func DecodeCheckpoint(b []byte) (*Model, error) {
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	if len(b) < len(checkpointMagic)+4+sha256.Size {
		return nil, corrupt("%d bytes is too short for a checkpoint", len(b))
	}
	if string(b[:len(checkpointMagic)]) != checkpointMagic {
		return nil, corrupt("magic %q, want %q", b[:len(checkpointMagic)], checkpointMagic)
	}
	body, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	hl := int(binary.LittleEndian.Uint32(b[len(checkpointMagic):]))
	start := len(checkpointMagic) + 4
	if hl > maxHeaderBytes || start+hl > len(body) {
		return nil, corrupt("header length %d does not fit in %d bytes (truncated?)", hl, len(b))
	}
	var h header
	if err := json.Unmarshal(body[start:start+hl], &h); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if err := h.Config.Validate(); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if h.Format != "whale-local-model" || h.DType != "float32" {
		return nil, corrupt("format %q dtype %q, want whale-local-model float32", h.Format, h.DType)
	}
	if h.Tokenizer != TokenizerVersion {
		return nil, fmt.Errorf("checkpoint tokenizer %q, this build has %q", h.Tokenizer, TokenizerVersion)
	}
	want := h.Config.layout()
	if !slices.EqualFunc(want, h.Tensors, func(a, b tensorSpec) bool { return a.Name == b.Name && slices.Equal(a.Shape, b.Shape) }) {
		return nil, corrupt("tensor list does not match the config")
	}
	n := h.Config.NumParams()
	copies := 1
	if h.Optimizer {
		copies = 3
	}
	payload := body[start+hl:]
	if int64(len(payload)) != int64(4*n*copies) || h.PayloadBytes != int64(len(payload)) {
		return nil, corrupt("payload is %d bytes, header says %d, config needs %d (truncated?)", len(payload), h.PayloadBytes, 4*n*copies)
	}
	if fsum := sha256.Sum256(body); !bytes.Equal(fsum[:], trailer) {
		return nil, corrupt("file digest mismatch")
	}
	if psum := sha256.Sum256(payload); hex.EncodeToString(psum[:]) != h.PayloadSHA256 {
		return nil, corrupt("payload digest mismatch")
	}
	read := func(off int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(payload[4*(off+i):]))
		}
		return out
	}
	m := &Model{cfg: h.Config, id: modelIDs.Add(1), step: h.Step}
	m.p = bind(h.Config, read(0))
	if h.Optimizer {
		m.opt = newAdam(h.Config, n)
		m.opt.m, m.opt.v = read(n), read(2*n)
	}
	return m, nil
}
