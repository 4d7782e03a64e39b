package searchqa

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/storage"
)

// entry is one member of an archive a test crafts: a header and, for a
// regular file, hdr.Size bytes of data (zeros when data is nil).
type entry struct {
	hdr  tar.Header
	data []byte
}

func file(name string, data []byte) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, data: data}
}

func zeros(name string, size int64) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}}
}

func dirEntry(name string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// craft packs entries as tar+zstd, as packDir does.
func craft(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		if e.hdr.Typeflag != tar.TypeReg {
			continue
		}
		var r io.Reader = bytes.NewReader(e.data)
		if e.data == nil {
			r = io.LimitReader(zeroReader{}, e.hdr.Size)
		}
		if _, err := io.Copy(tw, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testInfo is the whale-index.json of the indexes the tests craft.
func testInfo(t testing.TB) (IndexInfo, []byte) {
	info := IndexInfo{Format: IndexFormat, FormatVersion: IndexFormatVersion, Docs: 1,
		CorpusDigest: "sha256:" + strings.Repeat("ab", 32), Analyzer: "en", Scoring: "bm25", Created: time.Unix(0, 0).UTC()}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return info, b
}

// commitArchive commits archive as index name with a manifest whose
// summary says it unpacks to files files of bytes bytes: what a writer
// with access to the bucket may claim.
func commitArchive(t testing.TB, store *storage.Store, name string, archive []byte, files int, bytes int64) *StoredIndex {
	t.Helper()
	ctx := context.Background()
	info, _ := testInfo(t)
	w, prev, err := Indexes.NewWriter(ctx, store, name, configOf(info), "test")
	if err != nil || prev != nil {
		t.Fatalf("new writer: %v, %v", prev, err)
	}
	pw, err := w.Create(ctx, archiveTable, "tzst")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write(archive); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Finish(1); err != nil {
		t.Fatal(err)
	}
	m, err := w.Commit(ctx, map[string]any{sumFiles: files, sumBytes: bytes, sumCreated: info.Created.Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	si, err := storedIndex(name, m)
	if err != nil {
		t.Fatal(err)
	}
	return si
}

// treeSize is the number and total size of the regular files under dir.
func treeSize(t testing.TB, dir string) (files int, size int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			files++
			size += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, size
}

func emptyDir(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %q after a refused download", dir, names)
	}
}

// A 256 MiB file in an archive of a few dozen KB, whose manifest says the
// index is 4 KiB: refused at its header, before a byte of it is written,
// with an error that names the archive and the limit.
func TestDownloadIndexRefusesBomb(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	_, infoJSON := testInfo(t)
	const claimed = 4096
	const big = 256 << 20
	bomb := craft(t, file(infoFile, infoJSON), dirEntry("store/"), zeros("store/big.zap", big))
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed; want a small one", len(bomb))
	}
	si := commitArchive(t, store, "bomb", bomb, 2, claimed)

	cache := t.TempDir()
	start := time.Now()
	_, _, err := DownloadIndex(ctx, store, "bomb", cache)
	if err == nil {
		t.Fatal("bomb accepted")
	}
	for _, want := range []string{si.Archive.Name, "store/big.zap", strconv.Itoa(big), "exceeds the " + strconv.Itoa(claimed) + " bytes the manifest records"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want it to say %q", err, want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing the bomb took %v", d)
	}
	emptyDir(t, cache)

	// What unpack wrote before it refused: the small file, nothing of the
	// big one.
	dir := t.TempDir()
	_, _, err = unpack(ctx, bytes.NewReader(bomb), dir, unpackLimits{Files: 2, Bytes: claimed})
	if err == nil {
		t.Fatal("unpack accepted the bomb")
	}
	if files, size := treeSize(t, dir); files != 1 || size > claimed {
		t.Errorf("unpack wrote %d files, %d bytes before refusing; the limit is %d bytes", files, size, claimed)
	}
}

// Many files each within the limit, together beyond it: unpack stops at
// the first one that would go over and has written no more than the limit.
func TestUnpackStopsAtTheByteLimit(t *testing.T) {
	var entries []entry
	for i := range 100 {
		entries = append(entries, zeros(fmt.Sprintf("f%03d", i), 1000))
	}
	archive := craft(t, entries...)
	dir := t.TempDir()
	const limit = 10_500
	files, n, err := unpack(context.Background(), bytes.NewReader(archive), dir, unpackLimits{Files: 1000, Bytes: limit})
	if err == nil || !strings.Contains(err.Error(), "exceeds the 10500 bytes the manifest records") || !strings.Contains(err.Error(), `"f010"`) {
		t.Errorf("err = %v", err)
	}
	onDisk, size := treeSize(t, dir)
	if files != 10 || n != 10_000 || onDisk != files || size != n || size > limit {
		t.Errorf("unpack reports %d files, %d bytes; %d files, %d bytes on disk; limit %d", files, n, onDisk, size, limit)
	}
}

// More entries than the manifest says: refused, through DownloadIndex and
// in unpack; so are directory floods and deep paths, which would make
// directories the file count does not see.
func TestDownloadIndexRefusesExtraEntries(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	_, infoJSON := testInfo(t)
	entries := []entry{file(infoFile, infoJSON)}
	for i := range 5 {
		entries = append(entries, file(fmt.Sprintf("store/%d.zap", i), []byte("x")))
	}
	si := commitArchive(t, store, "many", craft(t, entries...), 2, 1<<20)
	cache := t.TempDir()
	_, _, err := DownloadIndex(ctx, store, "many", cache)
	if err == nil || !strings.Contains(err.Error(), si.Archive.Name) || !strings.Contains(err.Error(), "more than the 2 files the manifest records") {
		t.Errorf("too many files: err = %v", err)
	}
	emptyDir(t, cache)

	var dirs []entry
	for i := range 50 {
		dirs = append(dirs, dirEntry(fmt.Sprintf("d%d/", i)))
	}
	deep := strings.Repeat("a/", maxDepth) + "f"
	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{"directories", craft(t, dirs...), "more directories than the 3 files"},
		{"deep", craft(t, file(deep, []byte("x"))), "levels deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, err := unpack(ctx, bytes.NewReader(tc.archive), dir, unpackLimits{Files: 3, Bytes: 1 << 20})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) > 3 {
				t.Errorf("unpack made %d entries", len(ents))
			}
		})
	}

	// Fewer files or bytes than the manifest says is an error too: the
	// summary describes the archive exactly.
	commitArchive(t, store, "short", craft(t, file(infoFile, infoJSON)), 2, int64(len(infoJSON)))
	_, _, err = DownloadIndex(ctx, store, "short", cache)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unpacks to 1 files, %d bytes; the manifest says 2 files", len(infoJSON))) {
		t.Errorf("fewer files: err = %v", err)
	}
	emptyDir(t, cache)
}

// A tampered archive is refused on its digest before anything of it is
// unpacked: this one is a valid archive whose first entry is a symlink,
// which unpack would have refused with another error.
func TestDownloadIndexVerifiesBeforeUnpacking(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	src := buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)
	m, err := UploadIndex(ctx, store, "idx", src)
	if err != nil {
		t.Fatal(err)
	}
	akey := m.Manifest.FileKey(m.Archive)
	_, infoJSON := testInfo(t)
	evil := craft(t, entry{hdr: tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}, file(infoFile, infoJSON))
	pad := int(m.Archive.Size) - len(evil) - 8
	if pad < 0 {
		t.Fatalf("the crafted archive is %d bytes, the stored one %d", len(evil), m.Archive.Size)
	}
	// A zstd skippable frame makes it the stored archive's size.
	evil = binary.LittleEndian.AppendUint32(evil, 0x184D2A50)
	evil = binary.LittleEndian.AppendUint32(evil, uint32(pad))
	evil = append(evil, make([]byte, pad)...)
	if err := store.WriteAll(ctx, akey, evil); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	_, _, err = DownloadIndex(ctx, store, "idx", cache)
	if err == nil || !strings.Contains(err.Error(), m.Archive.SHA256) || !strings.Contains(err.Error(), "refused before unpacking") ||
		strings.Contains(err.Error(), "only files and directories") {
		t.Errorf("tampered archive: err = %v, want the digest check", err)
	}
	emptyDir(t, cache)

	// A longer archive is refused having read one byte more than the
	// manifest's size.
	if err := store.WriteAll(ctx, akey, append(evil, make([]byte, 10<<20)...)); err != nil {
		t.Fatal(err)
	}
	_, _, err = DownloadIndex(ctx, store, "idx", cache)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than the %d bytes the manifest says", m.Archive.Size)) {
		t.Errorf("longer archive: err = %v", err)
	}
	emptyDir(t, cache)
}

// A manifest whose summary does not bound the archive is refused.
func TestStoredIndexNeedsSizes(t *testing.T) {
	store := openFileStore(t)
	_, infoJSON := testInfo(t)
	archive := craft(t, file(infoFile, infoJSON))
	for i, sum := range [][2]any{{0, 10}, {1, 0}, {1.5, 10}, {-1, 10}, {1, 1e300}} {
		name := fmt.Sprintf("bad%d", i)
		info, _ := testInfo(t)
		w, _, err := Indexes.NewWriter(context.Background(), store, name, configOf(info), "test")
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := w.Create(context.Background(), archiveTable, "tzst")
		pw.Write(archive)
		if _, err := pw.Finish(1); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(context.Background(), map[string]any{sumFiles: sum[0], sumBytes: sum[1]}); err != nil {
			t.Fatal(err)
		}
		_, _, err = DownloadIndex(context.Background(), store, name, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "want whole numbers") {
			t.Errorf("summary %v: err = %v", sum, err)
		}
	}
}
