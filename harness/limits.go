package harness

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"go.starlark.net/starlark"
)

// Memory limits of harness code (see Options and doc.go, "Memory").
const (
	// DefaultMaxAllocBytes bounds what one operation makes: a string of 16
	// MiB (twice a hook argument's limit), a list or tuple of 1M elements
	// (as range()), a dict or set of 256K entries.
	DefaultMaxAllocBytes = 16 << 20
	// DefaultMaxMemoryBytes bounds what one call allocates through the
	// bounded operations, garbage included: building a 1 MiB string with
	// a thousand += costs half of it.
	DefaultMaxMemoryBytes = 1 << 30
	// MaxNesting bounds how deeply the values that json.decode makes,
	// and those that str(), repr(), json.encode and formatting walk, may
	// nest; walking deeper structures would cost stack and time that no
	// step limit sees.
	MaxNesting = 1000
	// MaxIntBits bounds an int made by *, <<, + or - of two ints, and
	// maxIntDigits the digits int() and json.decode read: converting
	// between decimal and binary takes time quadratic in the length.
	MaxIntBits   = 1 << 16
	maxIntDigits = 20_000
	// maxRegexWork bounds the bytes of input times the instructions of
	// the compiled pattern of one re call: RE2's automaton spends up to
	// some 25 ns on each such pair, so a call takes at most about 3 s
	// (and a typical one, a pattern of a few dozen instructions over a
	// few MiB, some milliseconds).
	maxRegexWork = 1 << 27
	// MaxCompareWork bounds the elements one comparison (== != < <= > >=),
	// membership test (in, not in, l.index, l.remove), hash of a dict key
	// or set element, or bulk insertion (dict(), set(), d.update, s | t,
	// ...) visits, counted as Starlark visits them: a shared list or tuple
	// each time it is reached, a string as one element per 256 bytes
	// compared or 128 bytes hashed. Starlark does each of these in one
	// step that no deadline interrupts; 2^22 visits take some tens of
	// milliseconds. MaxSortWork bounds the comparisons of one sorted(),
	// min() or max() together (a sort of n keys makes some n·log2(n)).
	MaxCompareWork = 1 << 22
	MaxSortWork    = 2 * MaxCompareWork

	// What a value costs, for the limits: a list or tuple element is an
	// interface (16 bytes), a dict or set entry some 64 bytes with its
	// hash table slot, a string its bytes plus a header.
	elemBytes  = 16
	entryBytes = 64
	strHeader  = 16
)

// limitError is a limit of the runtime that harness code ran into. It
// reaches the caller inside the *starlark.EvalError of the failed call and
// matches its kind (ErrMemory) with errors.Is, so the HookError or
// LoadError is classified by it.
type limitError struct {
	kind error
	msg  string
}

func (e *limitError) Error() string { return e.msg }
func (e *limitError) Unwrap() error { return e.kind }

func memoryError(format string, args ...any) error {
	return &limitError{kind: ErrMemory, msg: "memory limit: " + fmt.Sprintf(format, args...)}
}

// tooMuchWork is the error of an operation (op) that would visit more
// than max elements of its operands (MaxCompareWork or MaxSortWork).
func tooMuchWork(op string, max int64, limit string) error {
	return memoryError("%s would visit more than %d elements of its operands (%s); compare, hash or sort smaller values, or values that share less", op, max, limit)
}

// tooLarge is the error of an operation whose result would pass the
// per-value limit: what makes how much of what, and the limit's name.
func tooLarge(op string, n int64, unit string, max int64) error {
	limit := "MaxAllocBytes"
	if unit == "int" {
		limit = "MaxIntBits"
	}
	return memoryError("%s would make %s of %d %s; one value may hold at most %d %s (%s)", op, article(unit), n, unitWord(unit), max, unitWord(unit), limit)
}

func article(unit string) string {
	switch unit {
	case "string", "bytes":
		return "a " + unit
	case "int":
		return "an int"
	}
	return "a " + unit
}

func unitWord(unit string) string {
	switch unit {
	case "string", "bytes":
		return "bytes"
	case "int":
		return "bits"
	case "dict", "set":
		return "entries"
	}
	return "elements"
}

// maxElems is the most elements of a kind one value may hold under a
// per-value limit of maxBytes.
func maxElems(maxBytes int, per int) int64 { return int64(maxBytes / per) }

// checkSize refuses a value of n units of kind (string, bytes, list,
// tuple, dict, set) made by op, under the per-value limit.
func checkSize(lim *Options, op, kind string, n int64) error {
	max := int64(lim.MaxAllocBytes)
	switch kind {
	case "list", "tuple":
		max = maxElems(lim.MaxAllocBytes, elemBytes)
	case "dict", "set":
		max = maxElems(lim.MaxAllocBytes, entryBytes)
	case "int":
		max = MaxIntBits
	}
	if n > max {
		return tooLarge(op, n, kind, max)
	}
	return nil
}

// bytesOf is what n units of kind cost in memory.
func bytesOf(kind string, n int64) int64 {
	switch kind {
	case "list", "tuple":
		return n * elemBytes
	case "dict", "set":
		return n * entryBytes
	case "int":
		return n / 8
	}
	return n + strHeader
}

// intBits is the bit length of an int's magnitude.
func intBits(x starlark.Int) int64 {
	if v, ok := x.Int64(); ok {
		if v < 0 {
			if v == math.MinInt64 {
				return 64
			}
			v = -v
		}
		return int64(bits.Len64(uint64(v)))
	}
	return int64(x.BigInt().BitLen())
}

// A sizer bounds the length of the text a value prints as (str, repr,
// JSON), reaching shared values as often as printing would, without
// making the text. It gives up (errTooLong) once the length passes max,
// so its own work is bounded by max, and fails beyond MaxNesting levels.
type sizer struct {
	json  bool // JSON's quoting rules (json.encode)
	max   int64
	n     int64
	depth int
	path  []starlark.Value // the lists and dicts being walked, for cycles
}

var (
	errTooLong = errors.New("too long")
	errTooDeep = &limitError{kind: ErrMemory, msg: fmt.Sprintf("memory limit: a value nested deeper than %d levels (MaxNesting)", MaxNesting)}
)

// textSize bounds the length of str(v) (repr=false) or repr(v); it
// returns more than max, or an error for a value nested too deeply.
func textSize(v starlark.Value, repr bool, max int64) (int64, error) {
	sz := &sizer{max: max}
	if s, ok := v.(starlark.String); ok && !repr {
		return int64(len(s)), nil
	}
	err := sz.add(v)
	if err == errTooLong {
		return sz.n, nil
	}
	return sz.n, err
}

// jsonSize bounds the length of json.encode(v).
func jsonSize(v starlark.Value, max int64) (int64, error) {
	sz := &sizer{max: max, json: true}
	err := sz.add(v)
	if err == errTooLong {
		return sz.n, nil
	}
	return sz.n, err
}

func (sz *sizer) grow(n int64) error {
	sz.n += n
	if sz.n > sz.max {
		return errTooLong
	}
	return nil
}

func (sz *sizer) onPath(v starlark.Value) bool {
	for _, p := range sz.path {
		if p == v {
			return true
		}
	}
	return false
}

func (sz *sizer) add(v starlark.Value) error {
	if sz.depth >= MaxNesting {
		return errTooDeep
	}
	sz.depth++
	defer func() { sz.depth-- }()
	switch x := v.(type) {
	case starlark.NoneType:
		return sz.grow(5)
	case starlark.Bool:
		return sz.grow(5)
	case starlark.Int:
		return sz.grow(intBits(x)*30103/100000 + 2)
	case starlark.Float:
		return sz.grow(32)
	case starlark.String:
		if sz.json {
			return sz.grow(jsonQuotedLen(string(x)))
		}
		return sz.grow(quotedLen(string(x)))
	case starlark.Bytes:
		return sz.grow(quotedLen(string(x)) + 1)
	case *starlark.List:
		if sz.onPath(x) {
			return sz.grow(5)
		}
		sz.path = append(sz.path, x)
		defer func() { sz.path = sz.path[:len(sz.path)-1] }()
		if err := sz.grow(2 + 2*int64(x.Len())); err != nil {
			return err
		}
		for i := 0; i < x.Len(); i++ {
			if err := sz.add(x.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case starlark.Tuple:
		if err := sz.grow(3 + 2*int64(len(x))); err != nil {
			return err
		}
		for _, e := range x {
			if err := sz.add(e); err != nil {
				return err
			}
		}
		return nil
	case *starlark.Dict:
		if sz.onPath(x) {
			return sz.grow(5)
		}
		sz.path = append(sz.path, x)
		defer func() { sz.path = sz.path[:len(sz.path)-1] }()
		if err := sz.grow(2 + 4*int64(x.Len())); err != nil {
			return err
		}
		for k, v := range x.Entries() {
			if err := sz.add(k); err != nil {
				return err
			}
			if err := sz.add(v); err != nil {
				return err
			}
		}
		return nil
	case *starlark.Set:
		if err := sz.grow(7 + 2*int64(x.Len())); err != nil {
			return err
		}
		for e := range x.Elements() {
			if err := sz.add(e); err != nil {
				return err
			}
		}
		return nil
	case *starlark.Function, *starlark.Builtin:
		return sz.grow(int64(len(v.String())))
	case starlark.HasAttrs:
		// A struct-like value (a module, a re.Match): json.encode
		// writes its attributes, str() its own text.
		if sz.json {
			for _, name := range x.AttrNames() {
				a, err := x.Attr(name)
				if err != nil || a == nil {
					continue
				}
				if err := sz.grow(int64(len(name)) + 4); err != nil {
					return err
				}
				if err := sz.add(a); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return sz.grow(int64(len(v.String())))
}

// quotedLen bounds the length of a string as Starlark quotes it
// (syntax.Quote): exact for ASCII.
func quotedLen(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				n += 2
			case c >= 0x20 && c < 0x7f:
				n++
			default:
				n += 4
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			n += 4
		case strconv.IsPrint(r):
			n += int64(w)
		default:
			n += 10
		}
		i += w
	}
	return n
}

// jsonQuotedLen bounds the length of a string as json.encode quotes it
// (strconv.Quote for printable ASCII, encoding/json otherwise).
func jsonQuotedLen(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				n += 2
			case c == '<' || c == '>' || c == '&' || c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += int64(w)
		}
		i += w
	}
	return n
}

// maxFreezeVisits bounds the values that freezing a module's globals
// visits: Starlark freezes a tuple's elements each time it reaches the
// tuple, so tuples that share tuples (t = (t, t), sixty times) would take
// longer than the universe to freeze, in one Go call no deadline stops.
const maxFreezeVisits = 1 << 24

// checkFreeze counts what Freeze would visit in globals, as Freeze does
// (a list, dict or set once; a tuple or function every time it is
// reached), and fails past maxFreezeVisits.
func checkFreeze(globals starlark.StringDict) error {
	seen := map[starlark.Value]bool{}
	stack := make([]starlark.Value, 0, len(globals))
	for _, v := range globals {
		stack = append(stack, v)
	}
	visits := 0
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if visits++; visits > maxFreezeVisits {
			return memoryError("the module's values share nested tuples so much that freezing them would visit more than %d values", maxFreezeVisits)
		}
		switch x := v.(type) {
		case *starlark.List:
			if seen[x] {
				continue
			}
			seen[x] = true
			for i := 0; i < x.Len(); i++ {
				stack = append(stack, x.Index(i))
			}
		case *starlark.Dict:
			if seen[x] {
				continue
			}
			seen[x] = true
			for k, e := range x.Entries() {
				stack = append(stack, k, e)
			}
		case *starlark.Set:
			if seen[x] {
				continue
			}
			seen[x] = true
			for e := range x.Elements() {
				stack = append(stack, e)
			}
		case starlark.Tuple:
			stack = append(stack, x...)
		case *starlark.Function:
			for i := 0; i < x.NumParams(); i++ {
				if d := x.ParamDefault(i); d != nil {
					stack = append(stack, d)
				}
			}
			for i := 0; i < x.NumFreeVars(); i++ {
				if _, fv := x.FreeVar(i); fv != nil {
					stack = append(stack, fv)
				}
			}
		}
	}
	return nil
}
