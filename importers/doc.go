// Package importers brings tasks into whale from the formats users have:
// JSONL, the Lichess puzzle CSV, and the Parquet layout of verl, SkyRL and
// Search-R1.
//
// Contract:
//   - Importers stream: they call fn once per task, in file order, and keep
//     memory bounded by the longest line (JSONL) or one record batch
//     (Parquet), never by the file size. They write nothing themselves.
//   - Every read is bounded and stops when the context ends: a JSONL line
//     or CSV record at most Options.MaxLineBytes (8 MiB), a file, and what
//     a .gz/.zst file decompresses to, at most Options.MaxInputBytes
//     (8 GiB); a Parquet file whose metadata claims more than the file
//     holds (a column chunk past its end, more than MaxParquetRows rows, a
//     footer over 64 MiB) is refused before it is read by those claims.
//     Past a bound the error is an *Error naming the file, the line and
//     the bound.
//   - A file that is not regular (a FIFO, /dev/stdin) is read once, with
//     those bounds, into a temporary copy (see Input), so that it can be
//     detected, hashed and imported like a regular file.
//   - The first bad input stops the import with one *Error naming the file
//     and the line (JSONL, CSV; 1-based), or the row (Parquet; 0-based, as
//     pandas and polars show it), the column or field, and what was
//     expected. Tasks already passed to fn must then be discarded by the
//     caller: an import is all or nothing.
//   - An error returned by fn stops the import and comes back wrapped with
//     the position of the task (errors.Is/As see through it).
//   - Precedence for Domain and Split: a value the record states explicitly
//     (JSONL "domain"/"split", verl extra_info.split) wins over Options,
//     and Options win over values inferred from the data (verl data_source).
//   - Every Task has a non-empty ID, Question, Domain and at least one answer;
//     Meta is always a JSON object. With Options.Domains set, Domain is one
//     of them.
//   - Every string is valid UTF-8, as Parquet STRING columns require: bytes
//     that are not are an error naming the line and byte offset (JSONL,
//     CSV) or the row and column (Parquet), never replaced.
//
// Uniqueness of IDs across a file or several files is the caller's check:
// it needs memory per task.
package importers
