package spec

import (
	"fmt"
	"strings"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/harness/archive"
)

// BuiltinInitial reads harness.initial. "h0" is the domain's baseline,
// which every stage knows by that name: ok is false. Another built-in
// name of the domain (registry.Entry.HarnessNames, e.g. "h0-tags") gives
// its source and ok: init stores it in the root's harness archive and the
// planner hands stages its content id, so no stage needs the name table.
// A "sha256:<hex>" id names a harness already in the archive: ok is false.
// An unknown name or a malformed id is an error naming the domain's
// harnesses. An unknown domain is validate's to report: no error here.
func (e *Experiment) BuiltinInitial() (src []byte, ok bool, err error) {
	name := e.Harness.Initial
	if strings.HasPrefix(name, "sha256:") {
		if _, err := archive.ParseID(name); err != nil {
			return nil, false, err
		}
		return nil, false, nil
	}
	if name == registry.BaselineHarness {
		return nil, false, nil
	}
	dom, err := registry.Get(e.Domain)
	if err != nil {
		return nil, false, nil
	}
	src, err = dom.Harness(name)
	if err != nil {
		return nil, false, fmt.Errorf("%w, or a harness id sha256:<hex> from the root's archive", err)
	}
	return src, true, nil
}
