package importers

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/whalerun/whale/schemas"
)

// Columns of the verl/SkyRL/Search-R1 layout and what each must hold.
const (
	colDataSource  = "data_source"
	colPrompt      = "prompt"
	colRewardModel = "reward_model"
	colExtraInfo   = "extra_info"
	colAbility     = "ability"
)

var verlExpected = map[string]string{
	colDataSource:  "string",
	colPrompt:      "list<struct<role: string, content: string>> or string",
	colRewardModel: "struct with ground_truth: string, list<string> or struct<target: list<string>>",
	colExtraInfo:   "struct",
	colAbility:     "string",
}

// VerlParquet reads the Parquet layout of verl, SkyRL and Search-R1 row
// group by row group and calls fn with one task per row:
//
//   - ID: "<data_source>-<split>-<extra_info.index>", or with the 0-based
//     row number when there is no index; "-<split>" only when the split is
//     known. The data source and split keep ids from different files of
//     one dataset apart.
//   - Question: extra_info.question when it is a non-empty string (the raw
//     question, free of the prompt template), else the content of the last
//     user message of prompt.
//   - Answers: reward_model.ground_truth (a string → [s]; a list; or
//     {target: list}); numbers become their text.
//   - Domain: Options.Domain, else inferred from data_source (nq, hotpotqa,
//     ... → searchqa; math_dapo, aime, gsm8k, ... → math; *chess* → chess).
//   - Split: extra_info.split, else Options.Split.
//   - Meta: {"data_source", "ability", "extra_info", "prompt", "style"}.
func VerlParquet(ctx context.Context, ra io.ReaderAt, size int64, name string, opts Options, fn func(schemas.Task) error) (err error) {
	// A damaged file can make the Parquet reader panic; that is bad input,
	// not a crash.
	var row int64 = -1
	defer func() {
		if r := recover(); r != nil {
			err = &Error{File: name, Row: row, Msg: fmt.Sprintf("unreadable Parquet data: %v", r)}
		}
	}()
	if err := checkParquetFooter(ra, size, name); err != nil {
		return err
	}
	// The column chunks are streamed rather than read whole: a chunk's
	// size comes from the file, and whole it would be one allocation of
	// that size.
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = true
	props.BufferSize = 1 << 20
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, size), file.WithReadProps(props))
	if err != nil {
		return fmt.Errorf("%s: not a readable Parquet file: %w", name, err)
	}
	defer pf.Close()
	if err := checkParquetMeta(pf.MetaData(), size, name); err != nil {
		return err
	}
	batch := opts.BatchRows
	if batch <= 0 {
		batch = defaultBatchRows
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: int64(batch)}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%s: read Parquet schema: %w", name, err)
	}
	sc, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("%s: read Parquet schema: %w", name, err)
	}
	if err := checkVerlSchema(sc, name); err != nil {
		return err
	}
	// Read only the columns of the layout; other columns (images, long
	// reference solutions) would cost memory for nothing.
	var leaves []int
	for _, f := range fr.Manifest.Fields {
		if _, ok := verlExpected[f.Field.Name]; ok {
			leaves = appendLeaves(leaves, f)
		}
	}
	row = 0
	for rg := range pf.NumRowGroups() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rr, err := fr.GetRecordReader(ctx, leaves, []int{rg})
		if err != nil {
			return fmt.Errorf("%s: row group %d: %w", name, rg, err)
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			cols := verlColumns(rec)
			for i := range int(rec.NumRows()) {
				if row%checkEvery == 0 {
					if err := ctx.Err(); err != nil {
						rr.Release()
						return fmt.Errorf("%s: %w", name, err)
					}
				}
				task, perr := cols.task(i, row, name, opts)
				if perr == nil {
					perr = taskUTF8(task, row, name)
				}
				if perr != nil {
					rr.Release()
					return perr
				}
				if err := fn(task); err != nil {
					rr.Release()
					return callbackErr(name, 0, row, err)
				}
				row++
			}
		}
		rerr := rr.Err()
		rr.Release()
		if rerr != nil && rerr != io.EOF {
			return &Error{File: name, Row: row, Msg: fmt.Sprintf("read row group %d: %v", rg, rerr), Err: rerr}
		}
	}
	return nil
}

// Bounds on what a Parquet file's metadata may claim, checked before
// anything is read by it: the reader sizes its buffers from those claims.
const (
	// maxParquetFooter bounds the file metadata (the footer): a few KB per
	// row group. arrow-go reads it whole.
	maxParquetFooter = 64 << 20
	// MaxParquetRows bounds the rows a file's row groups may claim: far
	// beyond a task table (the Lichess dump is 5.6 million puzzles).
	MaxParquetRows = 1 << 30
)

// parquetMagic begins and ends a Parquet file.
var parquetMagic = []byte("PAR1")

// checkParquetFooter refuses a file that does not end as a Parquet file
// does (metadata length, PAR1) or whose metadata claims more than
// maxParquetFooter bytes.
func checkParquetFooter(ra io.ReaderAt, size int64, name string) error {
	if size < 12 {
		return fmt.Errorf("%s: not a readable Parquet file: %d bytes, fewer than the 12 of an empty one", name, size)
	}
	var tail [8]byte
	if _, err := ra.ReadAt(tail[:], size-8); err != nil {
		return fmt.Errorf("%s: read: %w", name, err)
	}
	if !bytes.Equal(tail[4:], parquetMagic) {
		return fmt.Errorf("%s: not a readable Parquet file: it does not end with PAR1", name)
	}
	if n := binary.LittleEndian.Uint32(tail[:4]); int64(n) > min(maxParquetFooter, size-12) {
		return &Error{File: name, Row: -1, Msg: fmt.Sprintf("the Parquet footer claims %d bytes of metadata; the file has %d bytes and an import reads at most %d of metadata", n, size, maxParquetFooter)}
	}
	return nil
}

// checkParquetMeta refuses metadata that claims what the file cannot
// hold: more rows than MaxParquetRows, a negative count, or a column chunk
// outside the file.
func checkParquetMeta(md *metadata.FileMetaData, size int64, name string) error {
	var rows int64
	for rg := range md.NumRowGroups() {
		g := md.RowGroup(rg)
		n := g.NumRows()
		if n < 0 || n > MaxParquetRows-rows {
			return &Error{File: name, Row: -1, Msg: fmt.Sprintf("row group %d claims %d rows; the file's row groups may hold at most %d in all", rg, n, int64(MaxParquetRows))}
		}
		rows += n
		for c := range g.NumColumns() {
			cc, err := g.ColumnChunk(c)
			if err != nil {
				return &Error{File: name, Row: -1, Msg: fmt.Sprintf("row group %d, column %d: %v", rg, c, err), Err: err}
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 {
				start = min(start, cc.DictionaryPageOffset())
			}
			if n := cc.TotalCompressedSize(); start < 0 || n < 0 || start > size || n > size-start {
				return &Error{File: name, Row: -1, Msg: fmt.Sprintf("row group %d, column %d claims %d bytes at offset %d, outside the file's %d bytes", rg, c, n, start, size)}
			}
		}
	}
	return nil
}

func appendLeaves(dst []int, f pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for _, c := range f.Children {
		dst = appendLeaves(dst, c)
	}
	return dst
}

func checkVerlSchema(sc *arrow.Schema, name string) error {
	for _, col := range []string{colDataSource, colPrompt, colRewardModel, colExtraInfo, colAbility} {
		idx := sc.FieldIndices(col)
		optional := col == colExtraInfo || col == colAbility
		if len(idx) == 0 {
			if optional {
				continue
			}
			return fmt.Errorf("%s: missing column %q (expected %s)", name, col, verlExpected[col])
		}
		dt := sc.Field(idx[0]).Type
		var ok bool
		switch col {
		case colDataSource:
			ok = isStringType(dt)
		case colAbility:
			ok = isStringType(dt) || dt.ID() == arrow.NULL
		case colPrompt:
			ok = isStringType(dt) || isChatList(dt)
		case colRewardModel:
			ok = isRewardModel(dt)
		case colExtraInfo:
			ok = dt.ID() == arrow.STRUCT || dt.ID() == arrow.NULL
		}
		if !ok {
			return fmt.Errorf("%s: column %q has type %s, expected %s", name, col, dt, verlExpected[col])
		}
	}
	return nil
}

func isStringType(dt arrow.DataType) bool {
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return true
	case arrow.DICTIONARY:
		return isStringType(dt.(*arrow.DictionaryType).ValueType)
	}
	return false
}

func isStringList(dt arrow.DataType) bool {
	l, ok := dt.(arrow.ListLikeType)
	return ok && dt.ID() != arrow.MAP && isStringType(l.Elem())
}

func isChatList(dt arrow.DataType) bool {
	l, ok := dt.(arrow.ListLikeType)
	if !ok || dt.ID() == arrow.MAP {
		return false
	}
	st, ok := l.Elem().(*arrow.StructType)
	if !ok {
		return false
	}
	role, okR := st.FieldByName("role")
	content, okC := st.FieldByName("content")
	return okR && okC && isStringType(role.Type) && isStringType(content.Type)
}

func isNumber(dt arrow.DataType) bool {
	return arrow.IsInteger(dt.ID()) || arrow.IsFloating(dt.ID())
}

func isRewardModel(dt arrow.DataType) bool {
	st, ok := dt.(*arrow.StructType)
	if !ok {
		return false
	}
	gt, ok := st.FieldByName("ground_truth")
	if !ok {
		return false
	}
	if isStringType(gt.Type) || isStringList(gt.Type) || isNumber(gt.Type) {
		return true
	}
	if gst, ok := gt.Type.(*arrow.StructType); ok {
		target, ok := gst.FieldByName("target")
		return ok && (isStringType(target.Type) || isStringList(target.Type) || isNumber(target.Type))
	}
	return false
}

// verlCols are the layout's columns of one record batch.
type verlCols struct {
	dataSource, prompt, ability arrow.Array
	rewardModel, extraInfo      *array.Struct
}

func verlColumns(rec arrow.RecordBatch) verlCols {
	get := func(name string) arrow.Array {
		if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	c := verlCols{dataSource: get(colDataSource), prompt: get(colPrompt), ability: get(colAbility)}
	c.rewardModel, _ = get(colRewardModel).(*array.Struct)
	c.extraInfo, _ = get(colExtraInfo).(*array.Struct)
	return c
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (c verlCols) task(i int, row int64, name string, opts Options) (schemas.Task, *Error) {
	var t schemas.Task
	src, ok := stringAt(c.dataSource, i)
	if !ok || src == "" {
		return t, rowErr(name, row, colDataSource, "is empty")
	}
	meta := map[string]any{"data_source": src}
	if c.ability != nil {
		if ab, ok := stringAt(c.ability, i); ok {
			meta["ability"] = ab
		}
	}

	var index, split, rawQuestion string
	if c.extraInfo != nil && c.extraInfo.IsValid(i) {
		meta["extra_info"] = toAny(c.extraInfo, i)
		if f := structField(c.extraInfo, "index"); f != nil && f.IsValid(i) {
			index = scalarText(f, i)
		}
		if f := structField(c.extraInfo, "split"); f != nil && isStringType(f.DataType()) {
			split, _ = stringAt(f, i)
		}
		if f := structField(c.extraInfo, "question"); f != nil && isStringType(f.DataType()) {
			rawQuestion, _ = stringAt(f, i)
		}
	}

	var msgs []chatMessage
	if isStringType(c.prompt.DataType()) {
		s, ok := stringAt(c.prompt, i)
		if !ok {
			return t, rowErr(name, row, colPrompt, "is null")
		}
		msgs = []chatMessage{{Role: "user", Content: s}}
	} else {
		var perr string
		msgs, perr = chatAt(c.prompt.(array.ListLike), i)
		if perr != "" {
			return t, rowErr(name, row, colPrompt, "%s", perr)
		}
	}
	meta["prompt"] = msgs
	t.Question = rawQuestion
	if strings.TrimSpace(t.Question) == "" {
		for _, m := range msgs {
			if m.Role == "user" {
				t.Question = m.Content
			}
		}
	}
	if strings.TrimSpace(t.Question) == "" {
		return t, rowErr(name, row, colPrompt, "has no user message with content")
	}

	rm := c.rewardModel
	if !rm.IsValid(i) {
		return t, rowErr(name, row, colRewardModel, "is null")
	}
	if f := structField(rm, "style"); f != nil && isStringType(f.DataType()) {
		if s, ok := stringAt(f, i); ok {
			meta["style"] = s
		}
	}
	answers, aerr := groundTruth(structField(rm, "ground_truth"), i)
	if aerr != "" {
		return t, rowErr(name, row, colRewardModel+".ground_truth", "%s", aerr)
	}
	t.Answers = answers

	t.Split = split
	if t.Split == "" {
		t.Split = opts.Split
	}
	t.Domain = opts.Domain
	if t.Domain == "" {
		t.Domain = domainOf(src)
	}
	if t.Domain == "" {
		return t, rowErr(name, row, colDataSource, "cannot tell the domain of data source %s; pass the domain for the import", quote(src))
	}
	if msg := opts.unknownDomain(t.Domain); msg != "" {
		return t, rowErr(name, row, "", "the import's domain: %s", msg)
	}
	id := index
	if id == "" {
		id = strconv.FormatInt(row, 10)
	}
	if t.Split != "" {
		id = t.Split + "-" + id
	}
	t.ID = src + "-" + id

	if where, off, b := badUTF8In(meta, ""); off >= 0 {
		// encoding/json would replace the bytes without a word.
		return t, rowErr(name, row, where, "%s", utf8Msg(b, off, "value"))
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return t, rowErr(name, row, "", "encode meta: %v", err)
	}
	t.Meta = string(m)
	return t, nil
}

// taskUTF8 refuses a task with a string that is not UTF-8 (Parquet
// STRING columns written by other tools are not checked), naming the
// column it came from.
func taskUTF8(t schemas.Task, row int64, name string) *Error {
	fields := []struct{ column, s string }{
		{colDataSource, t.ID}, {colPrompt, t.Question}, {colExtraInfo + ".split", t.Split},
	}
	for _, a := range t.Answers {
		fields = append(fields, struct{ column, s string }{colRewardModel + ".ground_truth", a})
	}
	for _, f := range fields {
		if off := badUTF8(f.s); off >= 0 {
			return rowErr(name, row, f.column, "%s", utf8Msg(f.s[off], off, "value"))
		}
	}
	return nil
}

// badUTF8In finds the first string in a meta value (as toAny builds them)
// that is not UTF-8: its path under at, the byte offset and the byte; the
// offset is -1 when there is none.
func badUTF8In(v any, at string) (string, int, byte) {
	switch x := v.(type) {
	case string:
		if off := badUTF8(x); off >= 0 {
			return at, off, x[off]
		}
	case []chatMessage:
		for i, m := range x {
			for _, f := range [][2]string{{"role", m.Role}, {"content", m.Content}} {
				if off := badUTF8(f[1]); off >= 0 {
					return fmt.Sprintf("%s[%d].%s", at, i, f[0]), off, f[1][off]
				}
			}
		}
	case []any:
		for i, item := range x {
			if p, off, b := badUTF8In(item, fmt.Sprintf("%s[%d]", at, i)); off >= 0 {
				return p, off, b
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := k
			if at != "" {
				p = at + "." + k
			}
			if off := badUTF8(k); off >= 0 {
				return p, off, k[off]
			}
			if p, off, b := badUTF8In(x[k], p); off >= 0 {
				return p, off, b
			}
		}
	}
	return "", -1, 0
}

func chatAt(l array.ListLike, i int) ([]chatMessage, string) {
	if !l.IsValid(i) {
		return nil, "is null"
	}
	st := l.ListValues().(*array.Struct)
	role, content := structField(st, "role"), structField(st, "content")
	start, end := l.ValueOffsets(i)
	msgs := make([]chatMessage, 0, end-start)
	for j := int(start); j < int(end); j++ {
		if !st.IsValid(j) {
			return nil, fmt.Sprintf("message %d is null", j-int(start))
		}
		r, _ := stringAt(role, j)
		c, _ := stringAt(content, j)
		msgs = append(msgs, chatMessage{Role: r, Content: c})
	}
	return msgs, ""
}

// groundTruth reads reward_model.ground_truth; the message is "" on success.
func groundTruth(gt arrow.Array, i int) ([]string, string) {
	if gt == nil || !gt.IsValid(i) {
		return nil, "is null"
	}
	if st, ok := gt.(*array.Struct); ok {
		gt = structField(st, "target")
		if gt == nil || !gt.IsValid(i) {
			return nil, "target is null"
		}
	}
	var out []string
	if l, ok := gt.(array.ListLike); ok {
		start, end := l.ValueOffsets(i)
		vals := l.ListValues()
		for j := int(start); j < int(end); j++ {
			s, ok := stringAt(vals, j)
			if !ok || strings.TrimSpace(s) == "" {
				return nil, fmt.Sprintf("answer %d is empty", j-int(start))
			}
			out = append(out, s)
		}
	} else {
		s := scalarText(gt, i)
		if strings.TrimSpace(s) == "" {
			return nil, "is empty"
		}
		out = []string{s}
	}
	if len(out) == 0 {
		return nil, "has no answers"
	}
	return out, ""
}

func structField(st *array.Struct, name string) arrow.Array {
	if st == nil {
		return nil
	}
	idx, ok := st.DataType().(*arrow.StructType).FieldIdx(name)
	if !ok {
		return nil
	}
	return st.Field(idx)
}

// stringAt reads a string-typed value; ok is false for null.
func stringAt(a arrow.Array, i int) (string, bool) {
	if a == nil || a.IsNull(i) {
		return "", false
	}
	switch x := a.(type) {
	case *array.String:
		return x.Value(i), true
	case *array.LargeString:
		return x.Value(i), true
	case *array.StringView:
		return x.Value(i), true
	case *array.Dictionary:
		return stringAt(x.Dictionary(), x.GetValueIndex(i))
	}
	return a.ValueStr(i), true
}

// scalarText renders a string or number value; integral floats lose ".0"
// so that an index or answer 3.0 reads "3".
func scalarText(a arrow.Array, i int) string {
	switch x := a.(type) {
	case *array.Float64:
		return formatFloat(x.Value(i))
	case *array.Float32:
		return formatFloat(float64(x.Value(i)))
	}
	s, _ := stringAt(a, i)
	return s
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// toAny converts one value of any Arrow type to something encoding/json
// writes faithfully. arrow's own GetOneForMarshal panics on NaN inside
// lists, so this does not use it.
func toAny(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch x := a.(type) {
	case *array.Struct:
		st := x.DataType().(*arrow.StructType)
		m := make(map[string]any, x.NumField())
		for j := range x.NumField() {
			m[st.Field(j).Name] = toAny(x.Field(j), i)
		}
		return m
	case *array.Map:
		start, end := x.ValueOffsets(i)
		m := make(map[string]any, end-start)
		for j := int(start); j < int(end); j++ {
			m[x.Keys().ValueStr(j)] = toAny(x.Items(), j)
		}
		return m
	case array.ListLike:
		start, end := x.ValueOffsets(i)
		l := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			l = append(l, toAny(x.ListValues(), j))
		}
		return l
	case *array.String, *array.LargeString, *array.StringView, *array.Dictionary:
		s, _ := stringAt(a, i)
		return s
	case *array.Boolean:
		return x.Value(i)
	case *array.Binary:
		return x.Value(i)
	case *array.LargeBinary:
		return x.Value(i)
	case *array.Float64:
		return finite(x.Value(i))
	case *array.Float32:
		return finite(float64(x.Value(i)))
	case *array.Int64:
		return x.Value(i)
	case *array.Int32:
		return x.Value(i)
	case *array.Int16:
		return x.Value(i)
	case *array.Int8:
		return x.Value(i)
	case *array.Uint64:
		return x.Value(i)
	case *array.Uint32:
		return x.Value(i)
	case *array.Uint16:
		return x.Value(i)
	case *array.Uint8:
		return x.Value(i)
	}
	return a.ValueStr(i)
}

// finite keeps NaN and infinities, which JSON cannot hold, as text.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

var searchQASources = map[string]bool{
	"nq": true, "triviaqa": true, "popqa": true, "hotpotqa": true,
	"2wikimultihopqa": true, "2wiki": true, "musique": true, "bamboogle": true,
}

// domainOf infers the domain from a verl data_source; "" when unknown.
func domainOf(src string) string {
	s := strings.ToLower(src)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	base := strings.TrimPrefix(strings.TrimPrefix(s, "searchr1_"), "search_r1_")
	switch {
	case searchQASources[base] || strings.HasSuffix(base, "_search") && searchQASources[strings.TrimSuffix(base, "_search")]:
		return "searchqa"
	case strings.Contains(s, "chess"):
		return "chess"
	case strings.Contains(s, "math"), strings.Contains(s, "aime"), strings.Contains(s, "gsm8k"),
		strings.Contains(s, "dapo"), strings.Contains(s, "amc"):
		return "math"
	}
	return ""
}
