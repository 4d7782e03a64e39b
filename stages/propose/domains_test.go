package propose

import (
	"fmt"
	"io"
	"testing"

	"github.com/whalerun/whale/domains/chess"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/schemas"
)

// TestStageRealDomains proposes with mutate on the shipped domains, their
// h0s and their environments: every candidate survives the dry run, and
// prompt_only keeps to the prompts. The searchqa and math domains run
// without a retriever or a sandbox here, so a dry-run search is an
// environment failure, which must not be held against a candidate.
func TestStageRealDomains(t *testing.T) {
	cases := []struct {
		dom   episode.Domain
		tasks []schemas.Task
	}{
		{chess.NewDomain(), []schemas.Task{
			{ID: "00008", Domain: "chess", Question: "r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24", Answers: []string{"f2g3 e6e7 b2b1 b3c1 b1c1 h6c1"}, Meta: "{}"},
			{ID: "0000D", Domain: "chess", Question: "5rk1/1p3ppp/pq3b2/8/8/1P1Q1N2/P4PPP/3R2K1 w - - 2 27", Answers: []string{"d3d6 f8d8 d6d8 f6d8"}, Meta: "{}"},
		}},
		{mathdomain.NewDomain(nil), []schemas.Task{
			{ID: "m1", Domain: "math", Question: "What is 6 times 7?", Answers: []string{"42"}, Meta: "{}"},
			{ID: "m2", Domain: "math", Question: "What is 1 + 1?", Answers: []string{"2"}, Meta: "{}"},
		}},
		{searchqa.NewDomain(nil), []schemas.Task{
			{ID: "q1", Domain: "searchqa", Question: "Who wrote Hamlet?", Answers: []string{"Shakespeare"}, Meta: "{}"},
			{ID: "q2", Domain: "searchqa", Question: "Capital of France?", Answers: []string{"Paris"}, Meta: "{}"},
		}},
	}
	for _, c := range cases {
		for _, promptOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prompt_only=%v", c.dom.Name(), promptOnly), func(t *testing.T) {
				s := openStore(t, "mem://")
				tasks := commit(t, s, "tasks", &fixture{name: "tasks", files: map[string]func(io.Writer) (int64, error){
					"tasks.parquet": parquetOf(schemas.Tasks, c.tasks),
				}}, "tasks")
				cfg := Config{Backend: BackendMutate, M: 3, Parent: ParentH0, Iteration: 1, Domain: c.dom.Name(), PromptOnly: promptOnly}
				m, cands, rej := runStage(t, s, &Stage{Domain: c.dom}, cfg, 42, tasks)
				if len(cands) != 3 || len(rej) != 0 {
					t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
				}
				for _, cand := range cands {
					if promptOnly && cand.Axis != "prompt" {
						t.Fatalf("prompt_only candidate %s on axis %s", cand.Name, cand.Axis)
					}
				}
				t.Logf("%s: %s (dry-run env errors %v)", c.dom.Name(), names(cands), m.Summary["dry_run_env_errors"])
			})
		}
	}
}
