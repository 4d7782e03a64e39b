// Package storage is whale's only door to object storage.
//
// A Store is a bucket opened by URL (file://, mem://, s3://, gs://,
// azblob://) with an optional key prefix. It owns the *blob.Bucket, retries
// transient errors with backoff and jitter, fails at once on permanent ones,
// and names the redacted URL and key in every error, never a credential.
//
// Contract for callers:
//   - Keys are slash-separated and relative to the root; they never start
//     with "/" and never contain "..".
//   - A reader or writer is streaming: nothing is buffered whole in memory.
//   - CreateExclusive is atomic on every backend: of many concurrent callers
//     for one key exactly one succeeds, the others get ErrExists. On file://
//     roots this is done with a hard link, because fileblob's IfNotExist is
//     not atomic between concurrent writers.
//   - An object that a writer has not closed successfully is never visible.
//
// The commit protocol (stage folders, part and stage manifests) and leases
// are built on these operations in this package too.
package storage
