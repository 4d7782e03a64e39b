package propose

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// forEachStore runs fn against a fresh mem://, file:// and S3 (versitygw)
// root; the S3 run is skipped only in -short mode without a versitygw.
func forEachStore(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, openStore(t, "mem://")) })
	t.Run("file", func(t *testing.T) { fn(t, openStore(t, "file://"+t.TempDir())) })
	t.Run("s3", func(t *testing.T) { fn(t, openStore(t, s3test.NewBucketURL(t))) })
}

func openStore(t testing.TB, url string) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fakeBaseline is the fake domain's h0: a prompt, budgets, a TOPK and a
// parser for <answer> and <search>.
const fakeBaseline = `# h0 of the fake domain.

SYSTEM_PROMPT = "Answer the question inside <answer></answer> tags. Search with <search>query</search>."
USER_PROMPT = "Question: {question}"
MAX_TURNS = 4
FORMAT_RETRIES = 1
TOPK = 3

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.S)

def parse_action(text, state):
    answers = _ANSWER.findall(text)
    if answers:
        return {"kind": "answer", "answer": answers[-1].strip()}
    m = _SEARCH.search(text)
    if m:
        return {"kind": "tool", "tool": "search", "input": m.group(1).strip()}
    return {"kind": "invalid", "error": "no <answer> or <search>"}
`

// fakeDomain is a tiny episode.Domain: a question, a search tool that
// echoes its query, and an answer checked against the task's first answer.
type fakeDomain struct {
	envErr error // when set, every Step fails with it
}

func (*fakeDomain) Name() string { return "fake" }

func (*fakeDomain) Contract() *harness.Contract {
	base := harness.Base()
	return base.Extend(harness.Contract{
		Name: "fake",
		Constants: []harness.ConstSpec{
			{Name: "TOPK", Type: harness.TypeInt, Default: 3, Min: harness.Bound(1), Max: harness.Bound(10), Doc: "Passages per search."},
			{Name: "VERBOSE", Type: harness.TypeBool, Default: false, Doc: "Whether results are long."},
			{Name: "STYLE", Type: harness.TypeString, Default: "plain", Shape: harness.Enum{"plain", "fancy"}, Doc: "How results look."},
		},
	})
}

func (*fakeDomain) Baseline() []byte { return []byte(fakeBaseline) }

func (d *fakeDomain) NewEnv(_ context.Context, task schemas.Task, h *harness.Harness) (episode.Env, error) {
	return &fakeEnv{task: task, topk: h.Int("TOPK"), err: d.envErr}, nil
}

type fakeEnv struct {
	task schemas.Task
	topk int
	err  error
}

func (e *fakeEnv) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

func (e *fakeEnv) Step(_ context.Context, a harness.Action) (episode.Step, error) {
	if e.err != nil {
		return episode.Step{}, e.err
	}
	switch a.Kind {
	case "answer":
		ok := len(e.task.Answers) > 0 && a.Answer == e.task.Answers[0]
		r := 0.0
		if ok {
			r = 1
		}
		return episode.Step{Done: true, Outcome: episode.Outcome{Reward: r, Correct: ok, Answer: a.Answer}}, nil
	case "tool":
		docs := []any{}
		for i := range e.topk {
			docs = append(docs, map[string]any{"contents": fmt.Sprintf("Doc %d\nabout %s", i, a.Input)})
		}
		return episode.Step{ToolResult: map[string]any{"docs": docs}}, nil
	}
	return episode.Step{Illegal: "this domain takes answers and searches"}, nil
}

func (*fakeEnv) Tools() []models.Tool                  { return nil }
func (*fakeEnv) Final(context.Context) episode.Outcome { return episode.Outcome{} }

// fixture is a test stage that writes the files it is given.
type fixture struct {
	name    string
	files   map[string]func(w io.Writer) (int64, error)
	summary map[string]any
}

func (f *fixture) Name() string { return f.name }

func (f *fixture) Run(ctx context.Context, x *stages.Exec) error {
	for name, write := range f.files {
		w, err := x.Create(ctx, name)
		if err != nil {
			return err
		}
		n, err := write(w)
		if err != nil {
			w.Abort()
			return err
		}
		w.SetRows(n)
		if err := w.Close(); err != nil {
			return err
		}
	}
	for k, v := range f.summary {
		x.SetSummary(k, v)
	}
	return nil
}

func parquetOf[T any](table schemas.Table, rows []T) func(io.Writer) (int64, error) {
	return func(w io.Writer) (int64, error) {
		pw, err := schemas.NewWriter[T](w, table, schemas.WriterOptions{})
		if err != nil {
			return 0, err
		}
		if err := pw.Write(rows...); err != nil {
			return 0, err
		}
		return int64(len(rows)), pw.Close()
	}
}

func jsonOf(v any) func(io.Writer) (int64, error) {
	return func(w io.Writer) (int64, error) {
		return 1, json.NewEncoder(w).Encode(v)
	}
}

// commit runs a fixture stage at position and returns an input ref to it.
func commit(t *testing.T, s *storage.Store, position string, f *fixture, inputName string) stages.InputRef {
	t.Helper()
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: position, Config: map[string]any{}, Seed: 1, Log: quiet}, f)
	if err != nil {
		t.Fatalf("commit fixture %s: %v", f.name, err)
	}
	return stages.InputRef{Name: inputName, Position: position, Stage: f.name}
}

var testTasks = []schemas.Task{
	{ID: "t1", Domain: "fake", Split: "search", Question: "What is the capital of France?", Answers: []string{"Paris"}, Meta: "{}"},
	{ID: "t2", Domain: "fake", Split: "search", Question: "2+2?", Answers: []string{"4"}, Meta: "{}"},
	{ID: "t3", Domain: "fake", Split: "search", Question: "never read", Answers: []string{"x"}, Meta: "{}"},
}

func commitTasks(t *testing.T, s *storage.Store) stages.InputRef {
	return commit(t, s, "tasks", &fixture{name: "tasks", files: map[string]func(io.Writer) (int64, error){
		"tasks.parquet": parquetOf(schemas.Tasks, testTasks),
	}}, "tasks")
}

// runStage executes the propose stage at position with cfg and returns
// the committed manifest, the candidates and the rejections.
func runStage(t *testing.T, s *storage.Store, st *Stage, cfg Config, seed int64, inputs ...stages.InputRef) (*storage.Manifest, []schemas.Candidate, []Rejection) {
	t.Helper()
	res, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: cfg, Seed: seed, Inputs: inputs, Log: quiet}, st)
	if err != nil {
		t.Fatalf("propose: %v", err)
	}
	if !res.Committed {
		t.Fatalf("propose did not commit: %+v", res)
	}
	return res.Manifest, readCandidates(t, s, res.Manifest), readRejected(t, s, res.Manifest)
}

func readCandidates(t *testing.T, s *storage.Store, m *storage.Manifest) []schemas.Candidate {
	t.Helper()
	var out []schemas.Candidate
	files := m.Table("candidates")
	if len(files) != 1 {
		t.Fatalf("candidates files: %+v", m.Files)
	}
	ra, err := m.OpenFile(context.Background(), s, files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.ReadRows(context.Background(), ra, ra.Size(), func(c schemas.Candidate) error {
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func readRejected(t *testing.T, s *storage.Store, m *storage.Manifest) []Rejection {
	t.Helper()
	files := m.Table("rejected")
	if len(files) != 1 {
		t.Fatalf("rejected files: %+v", m.Files)
	}
	r, err := m.NewFileReader(context.Background(), s, files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Rejection
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if int64(len(out)) != files[0].Rows {
		t.Fatalf("rejected.json has %d entries, the manifest says %d", len(out), files[0].Rows)
	}
	return out
}

func readFile(t *testing.T, s *storage.Store, m *storage.Manifest, table string) string {
	t.Helper()
	files := m.Table(table)
	if len(files) != 1 {
		t.Fatalf("%s files: %+v", table, m.Files)
	}
	r, err := m.NewFileReader(context.Background(), s, files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func kinds(rs []Rejection) string {
	var k []string
	for _, r := range rs {
		k = append(k, r.Kind)
	}
	return strings.Join(k, ",")
}

func names(cs []schemas.Candidate) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

// withConst is fakeBaseline with one line replaced.
func withLine(t *testing.T, src, old, new string) string {
	t.Helper()
	if !strings.Contains(src, old) {
		t.Fatalf("source has no %q", old)
	}
	return strings.Replace(src, old, new, 1)
}

// reply formats an llm reply holding the given candidates.
func reply(cands ...[3]string) string {
	var b strings.Builder
	b.WriteString("Here are my candidates.\n\n")
	for i, c := range cands {
		fmt.Fprintf(&b, "### Candidate %d\nname: %s\naxis: %s\nhypothesis: a hypothesis for %s\n```python\n%s\n```\n\n", i+1, c[0], c[1], c[0], c[2])
	}
	return b.String()
}
