// Package schemas defines every artifact table of whale: the Go row types,
// their Arrow schemas and versions, and the Parquet readers and writers that
// stages, importers and the CLI use.
//
// Contract:
//   - A Table is named, versioned and carries the exact Arrow schema that
//     DuckDB, pyarrow, polars and pqarrow see when they open a file written by
//     Writer: strings are UTF8, lists are LIST, and no column is nullable.
//   - Writer streams rows of one table to any io.Writer as zstd Parquet; a
//     row group is cut by row count and by approximate uncompressed bytes, so
//     memory stays flat however many rows are written. The footer holds the
//     keys "whale.table" and "whale.schema_version".
//   - Readers work on an io.ReaderAt and a size and never load a whole file:
//     ReadRows and Head decode typed rows; ReadColumns decodes only the
//     requested columns into Arrow record batches; FileInfo reads the footer.
//   - Validate accepts a file that has every column of the table with a
//     compatible type (extra columns are allowed) and whose schema version is
//     not newer than the one this build knows. Failures wrap
//     ErrSchemaMismatch or ErrNewerSchema so callers can treat them as
//     permanent.
//
// The package imports nothing else of whale.
package schemas
