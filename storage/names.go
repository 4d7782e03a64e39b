package storage

import (
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
