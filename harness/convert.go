package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"

	"go.starlark.net/starlark"

	"github.com/whalerun/whale/schemas"
)

// Default bounds on one converted value (a hook's arguments or result, a
// helper's result). They keep a harness from handing back, or being handed,
// more than a model context could ever hold.
const (
	DefaultMaxValueBytes = 8 << 20 // total string bytes in one value
	DefaultMaxValueItems = 200_000 // total list elements and dict entries
	maxDepth             = 64      // nesting; also stops self-containing lists
)

// budget counts what one conversion has produced so far.
type budget struct {
	bytes, items       int
	maxBytes, maxItems int
}

func newBudget(maxBytes, maxItems int) *budget {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxValueBytes
	}
	if maxItems <= 0 {
		maxItems = DefaultMaxValueItems
	}
	return &budget{maxBytes: maxBytes, maxItems: maxItems}
}

func (b *budget) addBytes(n int) error {
	b.bytes += n
	if b.bytes > b.maxBytes {
		return fmt.Errorf("value too large: more than %d bytes of strings", b.maxBytes)
	}
	return nil
}

func (b *budget) addItems(n int) error {
	b.items += n
	if b.items > b.maxItems {
		return fmt.Errorf("value too large: more than %d list elements and dict entries", b.maxItems)
	}
	return nil
}

// ToStarlark converts a Go value to a fresh, unfrozen Starlark value:
// nil → None, bool, signed/unsigned ints → int, floats → float, string,
// slices and arrays → list, maps with string keys → dict (keys sorted, so
// iteration order is deterministic), schemas.Message and schemas.ToolCall →
// dict (empty optional fields left out), starlark.Value as is. Any other
// type (structs, pointers) goes through encoding/json, so its json tags
// name the dict keys.
func ToStarlark(v any) (starlark.Value, error) {
	return toStarlark(v, newBudget(0, 0), 0)
}

func toStarlark(v any, b *budget, depth int) (starlark.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		return starlark.None, nil
	case starlark.Value:
		return x, nil
	case bool:
		return starlark.Bool(x), nil
	case string:
		if err := b.addBytes(len(x)); err != nil {
			return nil, err
		}
		return starlark.String(x), nil
	case int:
		return starlark.MakeInt(x), nil
	case int64:
		return starlark.MakeInt64(x), nil
	case int32:
		return starlark.MakeInt64(int64(x)), nil
	case float64:
		return starlark.Float(x), nil
	case json.Number:
		return jsonNumber(x)
	case []any:
		if err := b.addItems(len(x)); err != nil {
			return nil, err
		}
		elems := make([]starlark.Value, len(x))
		for i, e := range x {
			sv, err := toStarlark(e, b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case map[string]any:
		if err := b.addItems(len(x)); err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := starlark.NewDict(len(x))
		for _, k := range keys {
			sv, err := toStarlark(x[k], b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
			if err := b.addBytes(len(k)); err != nil {
				return nil, err
			}
			_ = d.SetKey(starlark.String(k), sv) // a fresh dict accepts string keys
		}
		return d, nil
	case fields:
		if err := b.addItems(len(x)); err != nil {
			return nil, err
		}
		d := starlark.NewDict(len(x))
		for _, f := range x {
			sv, err := toStarlark(f.value, b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", f.key, err)
			}
			if err := b.addBytes(len(f.key)); err != nil {
				return nil, err
			}
			_ = d.SetKey(starlark.String(f.key), sv) // a fresh dict accepts string keys
		}
		return d, nil
	case schemas.Message:
		return toStarlark(messageFields(x), b, depth)
	case *schemas.Message:
		if x == nil {
			return starlark.None, nil
		}
		return toStarlark(messageFields(*x), b, depth)
	case []schemas.Message:
		if err := b.addItems(len(x)); err != nil {
			return nil, err
		}
		elems := make([]starlark.Value, len(x))
		for i, m := range x {
			sv, err := toStarlark(messageFields(m), b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case schemas.ToolCall:
		return toStarlark(toolCallFields(x), b, depth)
	}
	return reflectToStarlark(reflect.ValueOf(v), b, depth)
}

func reflectToStarlark(rv reflect.Value, b *budget, depth int) (starlark.Value, error) {
	switch rv.Kind() {
	case reflect.Bool:
		return starlark.Bool(rv.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return starlark.MakeInt64(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return starlark.MakeUint64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return starlark.Float(rv.Float()), nil
	case reflect.String:
		if err := b.addBytes(rv.Len()); err != nil {
			return nil, err
		}
		return starlark.String(rv.String()), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return starlark.NewList(nil), nil
		}
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			// []byte is text to a harness, not a list of numbers.
			if err := b.addBytes(rv.Len()); err != nil {
				return nil, err
			}
			return starlark.String(string(rv.Bytes())), nil
		}
		n := rv.Len()
		if err := b.addItems(n); err != nil {
			return nil, err
		}
		elems := make([]starlark.Value, n)
		for i := 0; i < n; i++ {
			sv, err := toStarlark(rv.Index(i).Interface(), b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("cannot pass a Go %s to Starlark: dict keys must be strings", rv.Type())
		}
		m := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			m[it.Key().String()] = it.Value().Interface()
		}
		return toStarlark(m, b, depth)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return starlark.None, nil
		}
		if rv.Kind() == reflect.Interface {
			return toStarlark(rv.Elem().Interface(), b, depth+1)
		}
	case reflect.Invalid:
		return starlark.None, nil
	}
	if rv.Kind() == reflect.Func || rv.Kind() == reflect.Chan || rv.Kind() == reflect.UnsafePointer || rv.Kind() == reflect.Complex64 || rv.Kind() == reflect.Complex128 {
		return nil, fmt.Errorf("cannot pass a Go %s to Starlark", rv.Type())
	}
	// Structs and pointers: their JSON form is what users see in docs.
	data, err := json.Marshal(rv.Interface())
	if err != nil {
		return nil, fmt.Errorf("cannot pass a Go %s to Starlark: %w", rv.Type(), err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("cannot pass a Go %s to Starlark: %w", rv.Type(), err)
	}
	return toStarlark(generic, b, depth+1)
}

func jsonNumber(n json.Number) (starlark.Value, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return starlark.MakeInt64(i), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return nil, fmt.Errorf("bad JSON number %q", n)
	}
	return starlark.Float(f), nil
}

// FromStarlark converts a Starlark value to plain Go: None → nil, bool,
// int → int64 (an error beyond int64), float → float64, string, bytes →
// string, list/tuple/set → []any, dict → map[string]any (keys must be
// strings). Functions, modules and other values are errors. The result is
// bounded by DefaultMaxValueBytes and DefaultMaxValueItems.
func FromStarlark(v starlark.Value) (any, error) {
	return fromStarlark(v, newBudget(0, 0), 0)
}

func fromStarlark(v starlark.Value, b *budget, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels (does a list contain itself?)", maxDepth)
	}
	switch x := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case starlark.Bool:
		return bool(x), nil
	case starlark.Int:
		i, ok := x.Int64()
		if !ok {
			return nil, fmt.Errorf("int %s does not fit in 64 bits", x)
		}
		return i, nil
	case starlark.Float:
		return float64(x), nil
	case starlark.String:
		if err := b.addBytes(len(x)); err != nil {
			return nil, err
		}
		return string(x), nil
	case starlark.Bytes:
		if err := b.addBytes(len(x)); err != nil {
			return nil, err
		}
		return string(x), nil
	case *starlark.Dict:
		if err := b.addItems(x.Len()); err != nil {
			return nil, err
		}
		m := make(map[string]any, x.Len())
		for _, item := range x.Items() {
			k, ok := item[0].(starlark.String)
			if !ok {
				return nil, fmt.Errorf("dict key %s is a %s, want string", clip(item[0].String(), 40), item[0].Type())
			}
			gv, err := fromStarlark(item[1], b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", string(k), err)
			}
			m[string(k)] = gv
		}
		return m, nil
	case starlark.Indexable: // list, tuple, range
		n := x.Len()
		if err := b.addItems(n); err != nil {
			return nil, err
		}
		l := make([]any, n)
		for i := 0; i < n; i++ {
			gv, err := fromStarlark(x.Index(i), b, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = gv
		}
		return l, nil
	case *starlark.Set:
		if err := b.addItems(x.Len()); err != nil {
			return nil, err
		}
		l := make([]any, 0, x.Len())
		it := x.Iterate()
		defer it.Done()
		var e starlark.Value
		for it.Next(&e) {
			gv, err := fromStarlark(e, b, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, gv)
		}
		return l, nil
	}
	return nil, fmt.Errorf("cannot return a Starlark %s to Go (want None, bool, int, float, string, list, tuple or dict)", v.Type())
}

// normalize converts a Go value the way a Starlark round trip would
// (int → int64, []string → []any, structs → maps), so that defaults written
// in Go are validated and returned exactly like harness results. The result
// is a fresh copy: nothing in it aliases a map or slice of v.
//
// The common types (what the episode loop passes: maps, lists, messages,
// scalars) are converted directly in Go; a Starlark round trip cost several
// times as much per hook call. Other types (structs, typed slices and
// maps) still take the round trip, so their conversion stays defined by
// ToStarlark alone.
func normalize(v any) (any, error) {
	out, _, err := normalizer{b: newBudget(0, 0)}.conv(v, 0)
	return out, err
}

// Plain is v as hooks receive it in plain Go, as FromStarlark makes it: a
// fresh copy with json.Number made int64 or float64, []string made []any
// and so on. Callers that pass the same value to many hook calls (the
// episode loop, a task's meta) convert it once with Plain.
func Plain(v any) (any, error) { return normalize(v) }

// normalizer is normalize under budget b. It counts what a round trip
// would count (string bytes and dict keys as ToStarlark does, list
// elements and dict entries as FromStarlark does), so that it fails
// exactly when one of them would. With share, a list or dict that is
// plain already is returned as it is, not copied: what Go defaults get
// (see callDefault).
type normalizer struct {
	b     *budget
	share bool
}

// conv converts v; changed reports whether the result is not v itself.
func (n normalizer) conv(v any, depth int) (out any, changed bool, err error) {
	if depth > maxDepth {
		return nil, false, fmt.Errorf("value nested deeper than %d levels", maxDepth)
	}
	b := n.b
	switch x := v.(type) {
	case nil, bool, int64, float64:
		return v, false, nil
	case string:
		return v, false, b.addBytes(len(x)) // v, not x: no new interface value
	case int:
		return int64(x), true, nil
	case int32:
		return int64(x), true, nil
	case json.Number:
		sv, err := jsonNumber(x)
		if err != nil {
			return nil, false, err
		}
		gv, err := fromStarlark(sv, b, depth)
		return gv, true, err
	case []any:
		if err := b.addItems(len(x)); err != nil {
			return nil, false, err
		}
		var out []any // nil while every element is kept as it is
		if !n.share {
			out = make([]any, len(x))
		}
		for i, e := range x {
			gv, changed, err := n.conv(e, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("[%d]: %w", i, err)
			}
			if changed && out == nil {
				out = make([]any, len(x))
				copy(out, x[:i])
			}
			if out != nil {
				out[i] = gv
			}
		}
		if out == nil {
			return v, false, nil // v, not x: no new interface value
		}
		return out, true, nil
	case map[string]any:
		if err := b.addItems(len(x)); err != nil {
			return nil, false, err
		}
		var out map[string]any // nil while every entry is kept as it is
		if !n.share {
			out = make(map[string]any, len(x))
		}
		for k, e := range x {
			gv, changed, err := n.conv(e, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("[%q]: %w", k, err)
			}
			if err := b.addBytes(len(k)); err != nil {
				return nil, false, err
			}
			if changed && out == nil {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2 // converted entries replace theirs below
				}
			}
			if out != nil {
				out[k] = gv
			}
		}
		if out == nil {
			return x, false, nil
		}
		return out, true, nil
	case fields:
		if err := b.addItems(len(x)); err != nil {
			return nil, false, err
		}
		out := make(map[string]any, len(x))
		for _, f := range x {
			gv, _, err := n.conv(f.value, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("[%q]: %w", f.key, err)
			}
			if err := b.addBytes(len(f.key)); err != nil {
				return nil, false, err
			}
			out[f.key] = gv
		}
		return out, true, nil
	case schemas.Message:
		return n.conv(messageFields(x), depth)
	case *schemas.Message:
		if x == nil {
			return nil, true, nil
		}
		return n.conv(messageFields(*x), depth)
	case []schemas.Message:
		if err := b.addItems(len(x)); err != nil {
			return nil, false, err
		}
		out := make([]any, len(x))
		for i, m := range x {
			gv, _, err := n.conv(messageFields(m), depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = gv
		}
		return out, true, nil
	case schemas.ToolCall:
		return n.conv(toolCallFields(x), depth)
	case starlark.Value:
		gv, err := fromStarlark(x, b, depth)
		return gv, true, err
	}
	// The round trip, for the rare types above; each half counts on its
	// own copy of the budget, as normalize's two conversions did.
	from := *b
	sv, err := toStarlark(v, b, depth)
	if err != nil {
		return nil, false, err
	}
	gv, err := fromStarlark(sv, &from, depth)
	b.bytes, b.items = max(b.bytes, from.bytes), max(b.items, from.items)
	return gv, true, err
}

// isFiniteNumber reports whether a float is usable (JSON cannot carry NaN).
func isFiniteNumber(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
