// Package dataprep prepares the datasets of an experiment: it splits one
// imported dataset into train, search and test datasets (Split), and
// checks that an experiment's train, search and test datasets share no
// task (CheckOverlap).
//
// Contract:
//   - Split assigns a task by a digest of (seed, task id) alone, never by
//     its row, so the same dataset, counts and seed always give the same
//     three datasets, whatever order the rows are in. Tasks are ranked by
//     digest; the first Test go to test, the next Search to search, the
//     next Train to train, the rest to none: growing one count does not
//     move a task between the other two sets. Each output is a dataset
//     committed by the storage protocol, its config naming the source's
//     digest, the counts and the seed, so a rerun with the same inputs
//     does nothing and an output name taken by other data is an
//     storage.ErrDatasetDiffers error, found before anything is written.
//   - Both stream the tasks, twice at most, and keep 16-byte digests rather
//     than rows: Split the digests of the tasks it keeps (a heap of
//     Train+Search+Test), CheckOverlap those of the ids and questions of
//     every dataset but the largest, which it streams against them.
//   - A question is the same as another when their texts are equal after
//     lowercasing and collapsing runs of whitespace.
//   - Bad input (unknown dataset, negative counts, more tasks asked than
//     the dataset has, an overlap) is an error wrapping ErrBadInput that
//     names the dataset, the flag or field, and what was expected.
package dataprep
