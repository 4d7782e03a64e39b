package episode

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/whalerun/whale/harness"
)

// taskMeta is a task's meta column as hooks see it: decoded, numbers as
// the harness runtime reads them (ints stay ints), without reference
// answers, filtered by the domain. It is plain Go (harness.Plain), so that
// no hook call of the episode converts it again.
func taskMeta(dom Domain, meta string) (map[string]any, error) {
	m, err := decodeMeta(meta)
	if err != nil {
		return nil, err
	}
	p, err := harness.Plain(m)
	if err != nil {
		return nil, err
	}
	return hookMeta(dom, p.(map[string]any)), nil
}

// decodeMeta is a task's meta column as a dict. Numbers stay json.Number,
// which the harness runtime turns into Starlark ints or floats as written.
func decodeMeta(meta string) (map[string]any, error) {
	out := map[string]any{}
	if m := strings.TrimSpace(meta); m == "" || m == "{}" {
		return out, nil
	}
	dec := json.NewDecoder(strings.NewReader(meta))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case nil:
		return out, nil
	}
	return nil, fmt.Errorf("want a JSON object, got %s", clip(meta, 40))
}

// hookMeta is the part of a task's meta hooks may see: without reference
// answers, and as the domain filters it. meta stays as is.
func hookMeta(dom Domain, meta map[string]any) map[string]any {
	drop := false
	for _, k := range ReferenceKeys {
		if _, ok := meta[k]; ok {
			drop = true
			break
		}
	}
	if drop {
		out := make(map[string]any, len(meta))
		for k, v := range meta {
			if !slices.Contains(ReferenceKeys, k) {
				out[k] = v
			}
		}
		meta = out
	}
	if f, ok := dom.(MetaFilter); ok {
		meta = f.HookMeta(meta)
	}
	return meta
}
