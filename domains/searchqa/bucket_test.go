package searchqa

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/storage"
)

func openFileStore(t *testing.T) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), "file://"+t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func buildSmall(t *testing.T, docs string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "idx")
	if _, err := BuildIndex(context.Background(), dir, jsonlCorpus(strings.NewReader(docs), "small.jsonl"), BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestUploadDownloadIndex(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	testIndex(t) // builds the shared index
	src := filepath.Join(sharedDir, "idx")
	const name, key = "wiki-test", "indexes/wiki-test"

	m, err := UploadIndex(ctx, store, name, src)
	if err != nil {
		t.Fatal(err)
	}
	if m.Docs != 61 || m.Files < 3 || m.Archive.Size == 0 || !strings.HasPrefix(m.Archive.Name, "index-") {
		t.Errorf("manifest = %+v", m)
	}
	for _, k := range []string{key + "/" + storage.ManifestName, key + "/" + m.Archive.Name} {
		if ok, err := store.Exists(ctx, k); !ok || err != nil {
			t.Errorf("%s: exists %v, %v", k, ok, err)
		}
	}
	// Uploading the same index again is a no-op returning the manifest.
	again, err := UploadIndex(ctx, store, name, src)
	if err != nil || !reflect.DeepEqual(again, m) {
		t.Errorf("second upload: %+v, %v", again, err)
	}

	cache := filepath.Join(t.TempDir(), "cache")
	dir, got, err := DownloadIndex(ctx, store, name, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) || filepath.Dir(dir) != cache || !strings.HasSuffix(dir, strings.TrimPrefix(m.CorpusDigest, "sha256:")) {
		t.Errorf("download: dir %s manifest %+v", dir, got)
	}
	x, err := OpenIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Retrieve(ctx, []string{"Starry Night painting"}, 1)
	x.Close()
	if err != nil || len(res[0]) != 1 || res[0][0].Title != "The Starry Night" {
		t.Errorf("search of downloaded index: %+v, %v", res, err)
	}

	// The second download reuses the cache: it works with the archive gone.
	if err := store.Delete(ctx, key+"/"+m.Archive.Name); err != nil {
		t.Fatal(err)
	}
	dir2, _, err := DownloadIndex(ctx, store, name, cache)
	if err != nil || dir2 != dir {
		t.Errorf("cached download: %s, %v", dir2, err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".download-*")); len(left) > 0 {
		t.Errorf("temporary directories left in the cache: %q", left)
	}
	// A fresh cache needs the archive.
	if _, _, err := DownloadIndex(ctx, store, name, t.TempDir()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("download without archive: err = %v", err)
	}
}

func TestUploadIndexConflicts(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	a := buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)
	b := buildSmall(t, `{"id": "1", "contents": "B\nbeta"}`)
	if _, err := UploadIndex(ctx, store, "idx", a); err != nil {
		t.Fatal(err)
	}
	_, err := UploadIndex(ctx, store, "idx", b)
	if err == nil || !strings.Contains(err.Error(), "already holds an index of corpus") {
		t.Errorf("other corpus at the same key: err = %v", err)
	}
	if _, err := UploadIndex(ctx, store, "idx2", t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a whale search index") {
		t.Errorf("upload of a non-index: err = %v", err)
	}
	if _, _, err := DownloadIndex(ctx, store, "nothing-here", t.TempDir()); !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "no search index") {
		t.Errorf("download of a missing key: err = %v", err)
	}
}

func TestDownloadIndexRejectsDamage(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	src := buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)
	m, err := UploadIndex(ctx, store, "idx", src)
	if err != nil {
		t.Fatal(err)
	}
	akey := "indexes/idx/" + m.Archive.Name
	good, err := store.ReadAll(ctx, akey)
	if err != nil {
		t.Fatal(err)
	}

	// Same length, one byte changed: the digest check catches it (or zstd's
	// own checksum does first).
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	if err := store.WriteAll(ctx, akey, bad); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if _, _, err := DownloadIndex(ctx, store, "idx", cache); err == nil {
		t.Fatal("damaged archive accepted")
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("a failed download left %d entries in the cache", len(ents))
	}

	// A valid archive that is not the one the manifest names.
	other := packBytes(t, buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`))
	if err := store.WriteAll(ctx, akey, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := DownloadIndex(ctx, store, "idx", cache); err == nil || !strings.Contains(err.Error(), "the manifest says") {
		t.Errorf("swapped archive: err = %v", err)
	}

	// A cache entry that is not an index is reported, not overwritten.
	if err := store.WriteAll(ctx, akey, good); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(cache, IndexFormat+"-v1-"+strings.TrimPrefix(m.CorpusDigest, "sha256:"))
	if err := os.MkdirAll(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := DownloadIndex(ctx, store, "idx", cache); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("damaged cache entry: err = %v", err)
	}
	os.Remove(entry)
	if _, _, err := DownloadIndex(ctx, store, "idx", cache); err != nil {
		t.Errorf("after repair: %v", err)
	}
}

func packBytes(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, _, err := packDir(context.Background(), &buf, dir); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpackRejectsUnsafeEntries(t *testing.T) {
	tests := []struct {
		name string
		hdr  tar.Header
		want string
	}{
		{"parent", tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}, "not a relative path"},
		{"absolute", tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}, "not a relative path"},
		{"inner parent", tar.Header{Name: "store/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}, "not a relative path"},
		{"symlink", tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "only files and directories"},
		{"hard link", tar.Header{Name: "link", Typeflag: tar.TypeLink, Linkname: "x"}, "only files and directories"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw, _ := zstd.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			if err := tw.WriteHeader(&tc.hdr); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			zw.Close()
			parent := t.TempDir()
			dir := filepath.Join(parent, "x")
			os.Mkdir(dir, 0o755)
			_, _, err := unpack(context.Background(), &buf, dir, unpackLimits{Files: 10, Bytes: 1 << 20})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(parent, "evil")); err == nil {
				t.Error("an entry escaped the directory")
			}
		})
	}
}

// A crash after the archive is uploaded and before the manifest is written
// leaves nothing visible: there is no index, and building again works.
func TestStoredIndexCrashBeforeManifest(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	src := buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)
	info, err := ReadIndexInfo(src)
	if err != nil {
		t.Fatal(err)
	}
	// What UploadIndex does up to its commit, then the process dies.
	w, prev, err := Indexes.NewWriter(ctx, store, "crashed", configOf(info), "test")
	if err != nil || prev != nil {
		t.Fatalf("new writer: prev %v, err %v", prev, err)
	}
	if _, _, err := uploadArchive(ctx, w, src, info.Docs); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := store.List(ctx, "indexes/crashed/", false, func(e storage.Entry) error { left = append(left, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 {
		t.Fatalf("want the uploaded archive alone in the bucket, got %q", left)
	}

	cache := t.TempDir()
	_, err = OpenStored(ctx, store, "crashed", cache)
	if !errors.Is(err, ErrNoIndex) || !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "no search index crashed") {
		t.Errorf("open before the commit: err = %v, want no index", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("the cache holds %d entries after a failed open", len(ents))
	}

	m, err := UploadIndex(ctx, store, "crashed", src)
	if err != nil {
		t.Fatalf("build after the crash: %v", err)
	}
	if m.Archive.Name == path.Base(left[0]) {
		t.Errorf("the new commit names the crashed upload's archive %s", m.Archive.Name)
	}
	x, err := OpenStored(ctx, store, "crashed", cache)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	res, err := x.Retrieve(ctx, []string{"alpha"}, 1)
	if err != nil || len(res[0]) != 1 || res[0][0].ID != "1" {
		t.Errorf("search: %+v, %v", res, err)
	}
}

// An archive of the same size and the same files, other bytes: only the
// sha256 the manifest records tells it apart, and the download refuses it.
func TestDownloadIndexRejectsCorruptPart(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	src := buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)
	m, err := UploadIndex(ctx, store, "idx", src)
	if err != nil {
		t.Fatal(err)
	}
	akey := m.Manifest.FileKey(m.Archive)
	good, err := store.ReadAll(ctx, akey)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	zr.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Recompressed with settings that make it smaller than the stored one.
	var alt bytes.Buffer
	for _, l := range []zstd.EncoderLevel{zstd.SpeedBetterCompression, zstd.SpeedFastest, zstd.SpeedBestCompression} {
		for _, crc := range []bool{false, true} {
			if alt.Len() > 0 && alt.Len()+8 <= len(good) {
				break
			}
			alt.Reset()
			zw, _ := zstd.NewWriter(&alt, zstd.WithEncoderLevel(l), zstd.WithEncoderCRC(crc))
			zw.Write(raw)
			zw.Close()
		}
	}
	pad := len(good) - alt.Len() - 8
	if pad < 0 {
		t.Fatalf("recompressed archive is %d bytes, the stored one %d: no room for padding", alt.Len(), len(good))
	}
	// A zstd skippable frame makes up the difference in size.
	alt.Write(binary.LittleEndian.AppendUint32(nil, 0x184D2A50))
	alt.Write(binary.LittleEndian.AppendUint32(nil, uint32(pad)))
	alt.Write(make([]byte, pad))
	if alt.Len() != len(good) || bytes.Equal(alt.Bytes(), good) {
		t.Fatalf("corrupt archive: %d bytes (want %d), equal %v", alt.Len(), len(good), bytes.Equal(alt.Bytes(), good))
	}
	if err := store.WriteAll(ctx, akey, alt.Bytes()); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	_, err = OpenStored(ctx, store, "idx", cache)
	if err == nil || !strings.Contains(err.Error(), "the manifest says") || !strings.Contains(err.Error(), m.Archive.SHA256) {
		t.Errorf("corrupt part: err = %v, want the digest check", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("a rejected download left %d entries in the cache", len(ents))
	}
}

// An index stored by the protocol before this one is named as such.
func TestOpenStoredLegacyLayout(t *testing.T) {
	ctx := context.Background()
	store := openFileStore(t)
	if err := store.WriteAll(ctx, "indexes/old/"+legacyManifest, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_, err := OpenStored(ctx, store, "old", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "index old in "+store.URL()+" was stored by an older whale; rebuild it with whale index build") {
		t.Errorf("legacy layout: err = %v", err)
	}
	if _, err := UploadIndex(ctx, store, "old", buildSmall(t, `{"id": "1", "contents": "A\nalpha"}`)); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	x, err := OpenStored(ctx, store, "old", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
}
