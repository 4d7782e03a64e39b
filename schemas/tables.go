package schemas

import (
	"reflect"

	"github.com/apache/arrow-go/v18/arrow"
)

// Footer key/value metadata written into every file.
const (
	MetaTable         = "whale.table"
	MetaSchemaVersion = "whale.schema_version"
)

// Table describes one artifact table. Tables are values; the registry below
// is the only source of them.
type Table struct {
	// Name is the table name written into the file metadata ("rollouts").
	Name string
	// Version increases whenever a column is added, removed or retyped.
	Version int
	// Arrow is the schema a Parquet reader sees for files of this table.
	Arrow *arrow.Schema

	row reflect.Type
	// added are the columns (paths as ValidateSchema spells them, e.g.
	// "messages[].reasoning") that came after version 1: files written
	// before them lack them and read them as zero values.
	added []string
	// stats are the string columns short enough to carry min/max
	// statistics; long text (messages, sources) skips them, or a single
	// 3 MB message would be copied into the footer twice per row group.
	stats []string
}

// Columns returns the names of the table's top-level columns in file order.
func (t Table) Columns() []string {
	out := make([]string, 0, t.Arrow.NumFields())
	for _, f := range t.Arrow.Fields() {
		out = append(out, f.Name)
	}
	return out
}

func str(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.BinaryTypes.String}
}

func i32(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32} }
func i64(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64} }
func f64(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64}
}

// list names its element "element", as the Parquet LIST spec does, so the
// hand-written schema equals what pqarrow derives from the file.
func list(name string, elem arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.ListOfField(arrow.Field{Name: "element", Type: elem})}
}

var (
	toolCallType = arrow.StructOf(
		str("id"),
		str("name"),
		str("arguments"),
	)
	messageType = arrow.StructOf(
		str("role"),
		str("content"),
		str("name"),
		str("tool_call_id"),
		list("tool_calls", toolCallType),
		str("reasoning"),
		list("token_ids", arrow.PrimitiveTypes.Int32),
		list("prompt_token_ids", arrow.PrimitiveTypes.Int32),
	)
	traceEventType = arrow.StructOf(
		i32("turn"),
		str("kind"),
		str("action"),
		str("feedback"),
	)
)

// The tables. Their Arrow schemas mirror the parquet tags of the row types
// field by field; a test holds the two together.
var (
	Tasks = Table{
		Name:    "tasks",
		Version: 1,
		Arrow: arrow.NewSchema([]arrow.Field{
			str("id"),
			str("domain"),
			str("split"),
			str("question"),
			list("answers", arrow.BinaryTypes.String),
			str("meta"),
		}, nil),
		row:   reflect.TypeFor[Task](),
		stats: []string{"id", "domain", "split"},
	}

	Rollouts = Table{
		Name:    "rollouts",
		Version: 3,
		Arrow: arrow.NewSchema([]arrow.Field{
			str("run"),
			str("position"),
			str("model_id"),
			str("harness_id"),
			str("task_id"),
			i32("sample"),
			i64("seed"),
			f64("reward"),
			{Name: "correct", Type: arrow.FixedWidthTypes.Boolean},
			str("answer"),
			str("finish_reason"),
			str("error"),
			i32("turns"),
			i64("prompt_tokens"),
			i64("completion_tokens"),
			i64("latency_ms"),
			list("messages", messageType),
			list("trace", traceEventType),
			str("tools"),
			str("schedule"),
			i32("round"),
			str("section"),
			str("stage"),
		}, nil),
		// Version 2 added reasoning, token ids and tools; version 3 the
		// columns that say where an episode ran.
		added: []string{"messages[].reasoning", "messages[].token_ids", "messages[].prompt_token_ids", "tools",
			"schedule", "round", "section", "stage"},
		row:   reflect.TypeFor[Rollout](),
		stats: []string{"run", "position", "model_id", "harness_id", "task_id", "finish_reason", "schedule", "section", "stage"},
	}

	SFT = Table{
		Name:    "sft",
		Version: 2,
		Arrow: arrow.NewSchema([]arrow.Field{
			str("example_id"),
			str("episode_id"),
			str("task_id"),
			list("messages", messageType),
			list("train_mask", arrow.FixedWidthTypes.Boolean),
			str("tools"),
		}, nil),
		added: []string{"messages[].reasoning", "messages[].token_ids", "messages[].prompt_token_ids", "tools"},
		row:   reflect.TypeFor[SFTExample](),
		stats: []string{"example_id", "episode_id", "task_id"},
	}

	Evals = Table{
		Name:    "evals",
		Version: 1,
		Arrow: arrow.NewSchema([]arrow.Field{
			str("harness_id"),
			str("model_id"),
			str("task_id"),
			i32("k"),
			f64("mean_reward"),
			f64("pass_at_k"),
			f64("mean_turns"),
			f64("mean_tokens"),
		}, nil),
		row:   reflect.TypeFor[Eval](),
		stats: []string{"harness_id", "model_id", "task_id"},
	}

	Candidates = Table{
		Name:    "candidates",
		Version: 1,
		Arrow: arrow.NewSchema([]arrow.Field{
			str("harness_id"),
			str("parent_id"),
			str("name"),
			str("hypothesis"),
			str("axis"),
			str("proposer"),
			str("source"),
		}, nil),
		row:   reflect.TypeFor[Candidate](),
		stats: []string{"harness_id", "parent_id", "name", "axis", "proposer"},
	}
)

var registry = []Table{Tasks, Rollouts, SFT, Evals, Candidates}

// Tables returns every table, in pipeline order.
func Tables() []Table {
	return append([]Table(nil), registry...)
}

// Lookup returns the table with the given name.
func Lookup(name string) (Table, bool) {
	for _, t := range registry {
		if t.Name == name {
			return t, true
		}
	}
	return Table{}, false
}

// tableOf returns the table whose row type is T.
func tableOf[T any]() (Table, bool) {
	rt := reflect.TypeFor[T]()
	for _, t := range registry {
		if t.row == rt {
			return t, true
		}
	}
	return Table{}, false
}
