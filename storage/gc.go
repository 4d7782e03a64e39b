package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Garbage collection of a run's stage folders (runs/<run>/stages/).
//
// Garbage is, in one run:
//
//   - a file in a kept committed folder that its _MANIFEST.json does not
//     name: the upload of a try that crashed or lost its shard's commit
//     race (NotInManifest);
//   - an attempt folder without a _MANIFEST.json whose newest object is
//     older than the age: a crashed or abandoned attempt (Uncommitted);
//   - a committed attempt that is not the latest committed attempt of its
//     stage at its position — a --force rerun wrote a newer one — once it
//     has been superseded for longer than the age (Superseded).
//
// Never garbage: the latest committed attempt of each stage at each
// position, with every file its manifest names, its _INPUTS.json and its
// _parts/; a superseded attempt that a kept attempt names as an input
// (the lineage of a current result stays readable; inputs are followed
// within the run only); folders whose names
// are not stage folders; anything outside runs/<run>/stages/.
//
// The age is the only guard for what is in flight. A shard's files
// become visible only when it closes them, so an attempt that is still
// running can look idle for as long as its longest shard runs (or waits
// in a queue to be requeued); and a reader that resolved an attempt just
// before a --force rerun superseded it may still be reading it. The age
// must exceed both. The run's lease is no guard: shards of a Slurm array
// run without it.
//
// Deletion starts where the commit protocol ends, as Thanos deletes a
// block's meta.json first: per folder the commit point (_MANIFEST.json), then
// the identity (_INPUTS.json, so that no new try joins the folder), then
// the part manifests (so that no commit job assembles parts whose files
// are gone), then the data. A crash at any point leaves a folder that
// readers ignore — never a committed folder with files missing — and the
// next collection finishes it as an uncommitted attempt. So no step needs
// to outlive a cancelled context: each prefix of the deletion is safe.

// GarbageKind says why Garbage lists an object.
type GarbageKind int

const (
	// NotInManifest: a file in a kept committed folder that its manifest
	// does not name.
	NotInManifest GarbageKind = iota + 1
	// Uncommitted: an object of an attempt folder without a manifest.
	Uncommitted
	// Superseded: an object of a committed attempt that a newer committed
	// attempt of the same stage at the same position replaced.
	Superseded
)

// GarbageEntry is one object Garbage lists.
type GarbageEntry struct {
	Entry
	Dir    string // key of the stage folder, without a trailing slash
	Folder Folder
	Kind   GarbageKind
	By     int // Superseded: the committed attempt that replaced this one
}

// Why says in a few words why the object is garbage: "not in manifest",
// "uncommitted attempt", "superseded by attempt N".
func (g GarbageEntry) Why() string {
	switch g.Kind {
	case NotInManifest:
		return "not in manifest"
	case Uncommitted:
		return "uncommitted attempt"
	case Superseded:
		return fmt.Sprintf("superseded by attempt %d", g.By)
	}
	return fmt.Sprintf("garbage kind %d", int(g.Kind))
}

// Garbage lists the garbage of a run's stage folders (see above) that is
// older than olderThan, in the order DeleteGarbage deletes it: folder by
// folder, and within a folder _MANIFEST.json, _INPUTS.json, _parts/, data.
// It deletes nothing. Cost: one recursive listing and one read per kept
// committed folder.
func Garbage(ctx context.Context, s *Store, run string, olderThan time.Duration) ([]GarbageEntry, error) {
	return garbageBefore(ctx, s, run, time.Now().Add(-olderThan))
}

// garbageBefore is Garbage with the age given as a point in time: what is
// older than cutoff.
func garbageBefore(ctx context.Context, s *Store, run string, cutoff time.Time) ([]GarbageEntry, error) {
	scans, err := scanRun(ctx, s, run)
	if err != nil {
		return nil, err
	}
	byDir := map[string]*folderScan{}
	committed := map[string][]*folderScan{} // by "<position>-<stage>", ascending attempts
	for _, f := range scans {
		byDir[f.dir] = f
		if f.committed {
			id := f.folder.Position + "-" + f.folder.Stage
			committed[id] = append(committed[id], f)
		}
	}
	// Mark: the latest committed attempts, and the committed attempts of
	// this run that kept ones name as inputs, transitively. kept holds
	// every marked folder; its manifest once read.
	kept := map[string]*Manifest{}
	var mark []string
	for _, fs := range committed {
		sort.Slice(fs, func(i, j int) bool { return fs[i].folder.Attempt < fs[j].folder.Attempt })
		latest := fs[len(fs)-1].dir
		kept[latest] = nil
		mark = append(mark, latest)
	}
	for len(mark) > 0 {
		ms, err := readManifests(ctx, s, mark)
		if err != nil {
			return nil, fmt.Errorf("collect garbage of run %s: %w", run, err)
		}
		mark = nil
		for _, m := range ms {
			kept[m.Dir] = m
			for _, in := range m.Inputs {
				dir, ok := strings.CutSuffix(in.Key, "/"+ManifestName)
				f := byDir[dir]
				if _, seen := kept[dir]; !ok || seen || f == nil || !f.committed {
					continue
				}
				slog.InfoContext(ctx, "storage: keeping a superseded attempt that a kept one reads", "folder", dir, "reader", m.Dir)
				kept[dir] = nil
				mark = append(mark, dir)
			}
		}
	}
	// Sweep, folder by folder in attempt order.
	slices.SortStableFunc(scans, func(a, b *folderScan) int {
		return cmp.Or(strings.Compare(a.folder.Position, b.folder.Position), strings.Compare(a.folder.Stage, b.folder.Stage),
			cmp.Compare(a.folder.Attempt, b.folder.Attempt))
	})
	var out []GarbageEntry
	for _, f := range scans {
		m, isKept := kept[f.dir]
		switch {
		case !f.committed:
			if f.newest.Before(cutoff) {
				out = append(out, wholeFolder(f, Uncommitted, 0)...)
			}
		case isKept:
			named := map[string]bool{ManifestName: true, InputsName: true}
			for _, fe := range m.Files {
				named[fe.Name] = true
			}
			for _, e := range f.objects {
				inner := strings.TrimPrefix(e.Key, f.dir+"/")
				if named[inner] || strings.HasPrefix(inner, PartsDir+"/") || !e.ModTime.Before(cutoff) {
					continue
				}
				out = append(out, GarbageEntry{Entry: e, Dir: f.dir, Folder: f.folder, Kind: NotInManifest})
			}
		default:
			// Not the latest, so a newer committed attempt exists: the
			// one that superseded this, when it committed.
			fs := committed[f.folder.Position+"-"+f.folder.Stage]
			by := fs[slices.Index(fs, f)+1]
			if f.newest.Before(cutoff) && by.committedAt.Before(cutoff) {
				out = append(out, wholeFolder(f, Superseded, by.folder.Attempt)...)
			}
		}
	}
	return out, nil
}

// deleteRank orders the objects of a folder for deletion: the commit
// point, the identity, the part manifests, the data.
func deleteRank(inner string) int {
	switch {
	case inner == ManifestName:
		return 0
	case inner == InputsName:
		return 1
	case strings.HasPrefix(inner, PartsDir+"/"):
		return 2
	}
	return 3
}

func wholeFolder(f *folderScan, kind GarbageKind, by int) []GarbageEntry {
	out := make([]GarbageEntry, len(f.objects))
	for i, e := range f.objects {
		out[i] = GarbageEntry{Entry: e, Dir: f.dir, Folder: f.folder, Kind: kind, By: by}
	}
	sortForDelete(out)
	return out
}

func sortForDelete(g []GarbageEntry) {
	sort.SliceStable(g, func(i, j int) bool {
		return deleteRank(strings.TrimPrefix(g[i].Key, g[i].Dir+"/")) < deleteRank(strings.TrimPrefix(g[j].Key, g[j].Dir+"/"))
	})
}

// Collected is what DeleteGarbage did.
type Collected struct {
	Objects int   // objects deleted
	Bytes   int64 // their size, as listed
	// Skipped are the uncommitted attempt folders left alone because
	// they were written to (or committed) after Garbage listed them.
	Skipped []string
}

// parallelDeletes bounds the deletes of one folder's part manifests or
// data files that run at once.
const parallelDeletes = 8

// DeleteGarbage deletes what Garbage listed, folder by folder, each in
// deletion order: for a superseded attempt its _MANIFEST.json first, so
// that a crash leaves an uncommitted folder, never a committed one with
// files missing. It refuses a superseded folder whose newer attempt is not
// committed, or that comes without its _MANIFEST.json. An uncommitted
// folder is listed again first and left alone (in Skipped) when anything
// in it is new since Garbage listed it. The first failure stops it; what
// was deleted until then is counted.
//
// On file:// roots the folders it emptied are removed too.
func DeleteGarbage(ctx context.Context, s *Store, g []GarbageEntry) (Collected, error) {
	var c Collected
	for i := 0; i < len(g); {
		j := i + 1
		for j < len(g) && g[j].Dir == g[i].Dir && g[j].Kind == g[i].Kind {
			j++
		}
		group := slices.Clone(g[i:j])
		i = j
		if err := ctx.Err(); err != nil {
			return c, err
		}
		sortForDelete(group)
		dir := group[0].Dir
		switch group[0].Kind {
		case NotInManifest:
			// Files no reader trusts: any order.
			if err := deleteEntries(ctx, s, group, &c); err != nil {
				return c, fmt.Errorf("collect garbage in %s: %w", dir, err)
			}
			continue
		case Uncommitted:
			changed, err := changedSince(ctx, s, group)
			if err != nil {
				return c, fmt.Errorf("collect garbage in %s: %w", dir, err)
			}
			if changed != "" {
				slog.WarnContext(ctx, "storage: leaving an uncommitted attempt that changed since it was listed", "folder", dir, "change", changed)
				c.Skipped = append(c.Skipped, dir)
				continue
			}
		case Superseded:
			if group[0].Key != dir+"/"+ManifestName {
				return c, fmt.Errorf("collect garbage in %s: a superseded attempt comes with its %s, deleted first; pass whole folders as Garbage lists them", dir, ManifestName)
			}
			f := group[0].Folder
			newer := path.Dir(dir) + "/" + Folder{Position: f.Position, Stage: f.Stage, Attempt: group[0].By}.String() + "/" + ManifestName
			ok, err := s.Exists(ctx, newer)
			if err != nil {
				return c, fmt.Errorf("collect garbage in %s: %w", dir, err)
			}
			if !ok || group[0].By <= f.Attempt {
				return c, fmt.Errorf("collect garbage in %s: refusing to delete it: attempt %d, said to supersede it, is not committed (%s)", dir, group[0].By, newer)
			}
		default:
			return c, fmt.Errorf("collect garbage in %s: unknown garbage kind %d", dir, group[0].Kind)
		}
		// Whole folders, one rank at a time: the commit point, the
		// identity, the part manifests, the data.
		for len(group) > 0 {
			rank := deleteRank(strings.TrimPrefix(group[0].Key, dir+"/"))
			n := 1
			for n < len(group) && deleteRank(strings.TrimPrefix(group[n].Key, dir+"/")) == rank {
				n++
			}
			if err := deleteEntries(ctx, s, group[:n], &c); err != nil {
				return c, fmt.Errorf("collect garbage in %s: %w", dir, err)
			}
			group = group[n:]
		}
		s.removeEmptyDirs(dir+"/"+PartsDir, dir)
	}
	return c, nil
}

// deleteEntries deletes es concurrently and counts what it deleted.
func deleteEntries(ctx context.Context, s *Store, es []GarbageEntry, c *Collected) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelDeletes)
	for _, e := range es {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			if err := s.Delete(gctx, e.Key); err != nil {
				return err
			}
			mu.Lock()
			c.Objects++
			c.Bytes += e.Size
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

// changedSince lists the folder of an uncommitted group again and says
// what is new in it since Garbage listed it ("" when nothing is): a
// manifest, an object it did not list, or one written again.
func changedSince(ctx context.Context, s *Store, group []GarbageEntry) (string, error) {
	dir := group[0].Dir
	listed := make(map[string]time.Time, len(group))
	for _, e := range group {
		listed[e.Key] = e.ModTime
	}
	errChanged := errors.New("changed")
	var what string
	err := s.List(ctx, dir+"/", false, func(e Entry) error {
		was, ok := listed[e.Key]
		switch {
		case e.Key == dir+"/"+ManifestName:
			what = "it was committed"
		case !ok:
			what = "new object " + e.Key
		case e.ModTime.After(was):
			what = "object " + e.Key + " was written again"
		default:
			return nil
		}
		return errChanged
	})
	if err != nil && !errors.Is(err, errChanged) {
		return "", err
	}
	return what, nil
}

// removeEmptyDirs removes the directories of keys that are left empty, on
// file:// roots, where deleting a folder's files leaves its directories
// behind. A directory that is not empty stays; errors are ignored, since
// an empty directory lists as nothing anyway.
func (s *Store) removeEmptyDirs(dirs ...string) {
	if s.dir == "" {
		return
	}
	for _, d := range dirs {
		_ = os.Remove(filepath.Join(s.dir, filepath.FromSlash(d)))
	}
}
