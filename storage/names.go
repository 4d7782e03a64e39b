package storage

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Names inside a stage folder. Everything else in a folder is a data file,
// and counts only when a committed manifest names it.
const (
	ManifestName = "_MANIFEST.json" // the commit point, written last
	InputsName   = "_INPUTS.json"   // the attempt's identity, written first
	PartsDir     = "_parts"         // one part manifest per committed shard
)

// MaxShards is the most shards a stage may run as: shard numbers are
// written with five digits so that names sort.
const MaxShards = 99999

var (
	runRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	stageRE    = regexp.MustCompile(`^[a-z]+$`)
	tableRE    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	extRE      = regexp.MustCompile(`^[a-z0-9]+$`)
	partNameRE = regexp.MustCompile(`^([0-9]{5})-of-([0-9]{5})\.json$`)
)

// ErrBadName is what every Check function's error wraps: a name the user
// gave (a run, stage, dataset, position) that cannot be a key segment.
var ErrBadName = errors.New("invalid name")

// nameError is a Check function's error: its own message, and
// errors.Is(err, ErrBadName).
type nameError struct{ msg string }

func (e *nameError) Error() string        { return e.msg }
func (e *nameError) Is(target error) bool { return target == ErrBadName }

func badName(format string, args ...any) error { return &nameError{fmt.Sprintf(format, args...)} }

// CheckRun reports whether name can be a run name in a key.
func CheckRun(name string) error {
	if !runRE.MatchString(name) {
		return badName("invalid run name %q: want letters, digits, '-' or '_' (at most 128)", name)
	}
	return nil
}

// CheckStage reports whether name is a valid stage name (lowercase letters).
func CheckStage(name string) error {
	if len(name) > 32 || !stageRE.MatchString(name) {
		return badName("invalid stage name %q: want 1 to 32 lowercase letters", name)
	}
	return nil
}

// MaxSegment is the longest name CheckSegment accepts, in bytes: a stage
// folder, "<position>-<stage>.a<N>", stays well inside the 255 bytes a
// file system allows in one name.
const MaxSegment = 128

// CheckSegment reports whether s is safe as one segment of a key on every
// backend: 1 to MaxSegment bytes of printable ASCII other than space
// ('!' to '~'), no '/', no "..", and no leading '.' (which also keeps it
// clear of the .whale-tmp folder of file:// roots). what names s in the
// error ("position", ...).
//
// Storage checks no more than this of a position: what positions a run's
// stages may take, and what they mean, is the planner's
// (pipeline/schedule.ParsePosition). A stage folder is
// "<position>-<stage>[.a<N>]" whatever the position says.
func CheckSegment(what, s string) error {
	why := ""
	switch {
	case s == "":
		why = "it is empty"
	case len(s) > MaxSegment:
		why = fmt.Sprintf("it is %d bytes long", len(s))
	case strings.Contains(s, "/"):
		why = "it contains '/'"
	case strings.Contains(s, ".."):
		why = `it contains ".."`
	case s[0] == '.':
		why = "it starts with '.'"
	default:
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c > '~' {
				why = fmt.Sprintf("byte %d is %q, not printable ASCII", i, c)
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return badName("invalid %s %q: %s; want one path segment: 1 to %d printable ASCII characters without spaces, no '/', no \"..\", not starting with '.'", what, s, why, MaxSegment)
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
// names have no dashes or dots, so the stage is what follows the last dash,
// up to the attempt suffix; the position is everything before that dash
// and need only be a safe segment (CheckSegment).
func ParseFolder(name string) (Folder, error) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return Folder{}, fmt.Errorf("invalid stage folder %q: want <position>-<stage>", name)
	}
	f := Folder{Position: name[:i], Stage: name[i+1:], Attempt: 1}
	if j := strings.IndexByte(f.Stage, '.'); j >= 0 {
		suffix := f.Stage[j+1:]
		f.Stage = f.Stage[:j]
		n, err := strconv.Atoi(strings.TrimPrefix(suffix, "a"))
		if !strings.HasPrefix(suffix, "a") || err != nil || n < 2 || strconv.Itoa(n) != suffix[1:] {
			return Folder{}, fmt.Errorf("invalid stage folder %q: the attempt suffix must be .a<N> with N ≥ 2", name)
		}
		f.Attempt = n
	}
	if err := CheckSegment("position", f.Position); err != nil {
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
