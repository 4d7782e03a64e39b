package schemas

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

var (
	// ErrSchemaMismatch: a file lacks a column of its table, has one with an
	// incompatible type, or says it holds another table.
	ErrSchemaMismatch = errors.New("schema mismatch")
	// ErrNewerSchema: a file was written with a schema version newer than the
	// one this build knows; upgrading whale is the fix.
	ErrNewerSchema = errors.New("schema version newer than this whale knows")
)

// Validate checks from the footer alone that a Parquet file can be read as
// table: its whale.table key (if any) names the table, its
// whale.schema_version (if any) is not newer than table.Version, and every
// column of the table is present with a compatible type (see ValidateSchema).
// Files written by other tools carry no whale.* keys and are judged by their
// columns only. Like FileInfo it takes no context.
func Validate(ra io.ReaderAt, size int64, table Table) error {
	f, err := readFooter(ra, size)
	if err != nil {
		return err
	}
	if name, ok := f.meta[MetaTable]; ok && name != table.Name {
		return fmt.Errorf("%w: file holds table %q, expected %q", ErrSchemaMismatch, name, table.Name)
	}
	v, err := f.version()
	if err != nil {
		return err
	}
	if v > table.Version {
		return fmt.Errorf("%w: file has %s schema version %d, this whale reads up to version %d; upgrade whale",
			ErrNewerSchema, table.Name, v, table.Version)
	}
	return ValidateSchema(f.schema, table)
}

// ValidateSchema checks that got has every column of table with a compatible
// type; extra columns are allowed, and so are missing columns the table added after
// version 1 (they read as zero values). Compatible means: the same kind of type
// (string, binary, bool, integer, floating point, list, struct); strings,
// lists and integers and floats of any width or layout (large_string,
// string_view, large_list, int64 for int32, ...); nullability is ignored,
// since nulls read as zero values; struct fields follow the same rules by
// name. The error lists every problem, each naming its column.
func ValidateSchema(got *arrow.Schema, table Table) error {
	var problems []string
	for _, want := range table.Arrow.Fields() {
		idx := got.FieldIndices(want.Name)
		if len(idx) == 0 && slices.Contains(table.added, want.Name) {
			continue
		}
		if len(idx) == 0 {
			problems = append(problems, fmt.Sprintf("column %q: missing (expected %s)", want.Name, TypeString(want.Type)))
			continue
		}
		problems = checkType(problems, table.added, want.Name, want.Type, got.Field(idx[0]).Type)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: table %s v%d: %s", ErrSchemaMismatch, table.Name, table.Version, strings.Join(problems, "; "))
	}
	return nil
}

func checkType(problems, added []string, path string, want, got arrow.DataType) []string {
	if typeKind(want) != typeKind(got) {
		return append(problems, fmt.Sprintf("column %q: expected %s, found %s", path, TypeString(want), TypeString(got)))
	}
	switch w := want.(type) {
	case arrow.ListLikeType:
		return checkType(problems, added, path+"[]", w.Elem(), got.(arrow.ListLikeType).Elem())
	case *arrow.StructType:
		g := got.(*arrow.StructType)
		for _, wf := range w.Fields() {
			sub := path + "." + wf.Name
			i, ok := g.FieldIdx(wf.Name)
			if !ok && slices.Contains(added, sub) {
				continue
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("column %q: missing (expected %s)", sub, TypeString(wf.Type)))
				continue
			}
			problems = checkType(problems, added, sub, wf.Type, g.Field(i).Type)
		}
	}
	return problems
}

// typeKind folds the layouts and widths that read into the same Go type.
func typeKind(dt arrow.DataType) string {
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return "string"
	case arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
		return "binary"
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return "integer"
	case arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64:
		return "float"
	case arrow.LIST, arrow.LARGE_LIST, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW:
		return "list"
	default:
		return dt.ID().String()
	}
}

// TypeString spells a type the way pyarrow users read it, without list
// element names or nullability: string, int32, double, bool,
// list<string>, struct<role: string, content: string>.
func TypeString(dt arrow.DataType) string {
	var b strings.Builder
	writeType(&b, dt)
	return b.String()
}

func writeType(b *strings.Builder, dt arrow.DataType) {
	switch t := dt.(type) {
	case arrow.ListLikeType:
		if dt.ID() == arrow.MAP {
			m := dt.(*arrow.MapType)
			b.WriteString("map<")
			writeType(b, m.KeyType())
			b.WriteString(", ")
			writeType(b, m.ItemType())
			b.WriteString(">")
			return
		}
		switch dt.ID() {
		case arrow.LARGE_LIST:
			b.WriteString("large_list<")
		case arrow.FIXED_SIZE_LIST:
			fmt.Fprintf(b, "fixed_size_list[%d]<", t.(*arrow.FixedSizeListType).Len())
		default:
			b.WriteString("list<")
		}
		writeType(b, t.Elem())
		b.WriteString(">")
	case *arrow.StructType:
		b.WriteString("struct<")
		for i, f := range t.Fields() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Name)
			b.WriteString(": ")
			writeType(b, f.Type)
		}
		b.WriteString(">")
	default:
		switch dt.ID() {
		case arrow.STRING:
			b.WriteString("string")
		case arrow.LARGE_STRING:
			b.WriteString("large_string")
		case arrow.STRING_VIEW:
			b.WriteString("string_view")
		case arrow.FLOAT32:
			b.WriteString("float")
		case arrow.FLOAT64:
			b.WriteString("double")
		case arrow.BOOL:
			b.WriteString("bool")
		default:
			b.WriteString(dt.String())
		}
	}
}
