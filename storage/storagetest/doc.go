// Package storagetest is the conformance suite of storage.Store: one set of
// cases that every backend (mem://, file://, S3 through versitygw, and any
// other root a test can open) must pass, so that code tested on one runs
// unchanged on the others.
//
// Run (or RunConfig) takes a function that opens an empty Store at a fresh
// prefix of one shared root; OpenUnder is such a function for a root URL.
package storagetest
