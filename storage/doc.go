// Package storage is whale's only door to object storage.
//
// A Store is a bucket opened by URL (file://, mem://, s3://, gs://,
// azblob://) with an optional key prefix. It owns the *blob.Bucket, retries
// transient errors with backoff and jitter, fails at once on permanent ones,
// and names the redacted URL and key in every error, never a credential.
//
// Contract for callers:
//
//   - Keys are slash-separated and relative to the root; they never start
//     with "/" and never contain "..".
//
//   - A reader or writer is streaming: nothing is buffered whole in memory.
//
//   - CreateExclusive is atomic on every backend: of many concurrent callers
//     for one key exactly one succeeds, the others get ErrExists. On file://
//     roots this is done with a hard link, because fileblob's IfNotExist is
//     not atomic between concurrent writers.
//
//   - An object that a writer has not closed successfully is never visible.
//
//   - mem://NAME is one in-memory bucket shared by every Open of NAME in
//     the process (tests); plain mem:// is a new empty bucket each time.
//
//   - Key names reserved on every backend: fileblob's "*.attrs" and
//     "*.<hex>.tmp" files, and any ".whale-tmp" segment.
//
//   - A stage's position is checked only as a safe key segment
//     (CheckSegment); which positions a run has, and what they mean, is
//     pipeline/schedule's grammar, not storage's.
//
// Built on these operations, in this package too:
//   - the commit protocol (commit.go): stage folders
//     runs/<run>/stages/<position>-<stage>[.aN]/ with _INPUTS.json first,
//     data files named per shard and try, _parts/ manifests created
//     exclusively, and _MANIFEST.json last — the commit point; the names
//     it uses (names.go), digests and canonical JSON (canonical.go), a
//     stage's identity (identity.go), manifests (manifest.go), listing
//     (list.go), verify (verify.go), and garbage collection (gc.go):
//     leftovers, old uncommitted attempts and superseded attempts, deleted
//     commit point first (`whale gc`);
//   - datasets (dataset.go): datasets/<name>/ with the same manifest, one
//     Collection of named folders; search indexes (indexes/<name>/, owned
//     by domains/searchqa) are another;
//   - leases (lease.go): runs/<run>/lease/ as append-only generations.
package storage
