package storage

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

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
	folder      Folder
	dir         string
	committed   bool
	committedAt time.Time // the _MANIFEST.json's ModTime
	objects     []Entry
	newest      time.Time
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
			fsn.committed, fsn.committedAt = true, e.ModTime
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

// parallelReads bounds the object reads one call runs at once when it
// reads many manifests, part manifests or files. The first error cancels
// the reads not yet done and is the one returned.
const parallelReads = 8

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
	return readManifests(ctx, s, dirs)
}

// readManifests reads the manifests of dirs, parallelReads at a time, in
// the order of dirs.
func readManifests(ctx context.Context, s *Store, dirs []string) ([]*Manifest, error) {
	out := make([]*Manifest, len(dirs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelReads)
	for i, dir := range dirs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			m, err := ReadManifest(gctx, s, dir)
			out[i] = m
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
