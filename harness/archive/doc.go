// Package archive is the content-addressed harness store of a root
// (DESIGN §2): harnesses/<hex>/harness.star, where <hex> is the sha256 of
// the source bytes, so that a harness id ("sha256:<hex>", as
// harness.SourceID makes it) names exactly one source forever.
//
// Contract:
//   - Put writes create-exclusively: a key that already holds the same bytes
//     is success (a retry, or a second proposer that found the same harness);
//     a key holding other bytes is an error, since that means the store was
//     tampered with or corrupted.
//   - Get verifies the sha256 of what it read against the id, so a caller
//     never runs a harness other than the one its id names.
//   - Errors name the id and the key.
package archive
