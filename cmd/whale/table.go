package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/whalerun/whale/schemas"
)

var errEnough = errors.New("enough rows")

// printHead prints the footer facts and the first n rows of a Parquet file
// as a text table, one cell truncated to width runes.
func printHead(ctx context.Context, out io.Writer, ra io.ReaderAt, size int64, n, width int, columns []string) error {
	info, err := schemas.FileInfo(ra, size)
	if err != nil {
		return err
	}
	table := info.Table
	if table == "" {
		table = "(not a whale table)"
	}
	fmt.Fprintf(out, "table %s, schema v%d, %d rows in %d row groups\n", table, info.SchemaVersion, info.Rows, info.RowGroups)
	if err := checkColumns(info, columns); err != nil {
		return err
	}
	if n <= 0 || info.Rows == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	printed := 0
	err = schemas.ReadColumns(ctx, ra, size, columns, func(rec arrow.RecordBatch) error {
		if printed == 0 {
			names := make([]string, rec.NumCols())
			for i := range names {
				names[i] = rec.ColumnName(i)
			}
			fmt.Fprintln(tw, strings.Join(names, "\t"))
		}
		for r := 0; r < int(rec.NumRows()) && printed < n; r++ {
			cells := make([]string, rec.NumCols())
			for c := range cells {
				col := rec.Column(c)
				if col.IsNull(r) {
					cells[c] = "null"
				} else {
					cells[c] = cell(col.ValueStr(r), width)
				}
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
			printed++
		}
		if printed >= n {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if int64(printed) < info.Rows {
		fmt.Fprintf(out, "... %d more rows\n", info.Rows-int64(printed))
	}
	return nil
}

// cell makes a value fit one table cell: one line, at most width runes.
func cell(s string, width int) string {
	s = strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
	if width > 0 && utf8.RuneCountInString(s) > width {
		r := []rune(s)
		s = string(r[:max(width-1, 1)]) + "…"
	}
	return s
}

// checkColumns makes a --columns name the file lacks a usage error that
// lists the columns it has.
func checkColumns(info schemas.Info, columns []string) error {
	have := make([]string, len(info.Columns))
	for i, c := range info.Columns {
		have[i] = c.Name
	}
	for _, c := range columns {
		if !slices.Contains(have, c) {
			return usagef("--columns: no column %q; the file has %s", c, strings.Join(have, ", "))
		}
	}
	return nil
}
