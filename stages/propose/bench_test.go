package propose

import (
	"context"
	"testing"

	"github.com/whalerun/whale/domains/chess"
	"github.com/whalerun/whale/schemas"
)

// BenchmarkValidate measures one candidate's validation: load and
// contract check, duplicate and prompt-only checks, and the dry run of two
// chess puzzles against the scripted model.
func BenchmarkValidate(b *testing.B) {
	dom := chess.NewDomain()
	in := mutateInput(b, dom, 1, 1, 1, false)
	out, err := mutate(in)
	if err != nil || len(out.proposals) != 1 {
		b.Fatal(err)
	}
	tasks := []schemas.Task{
		{ID: "00008", Domain: "chess", Question: "r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24", Answers: []string{"f2g3 e6e7 b2b1 b3c1 b1c1 h6c1"}},
		{ID: "0000D", Domain: "chess", Question: "5rk1/1p3ppp/pq3b2/8/8/1P1Q1N2/P4PPP/3R2K1 w - - 2 27", Answers: []string{"d3d6 f8d8 d6d8 f6d8"}},
	}
	st := &Stage{Domain: dom}
	b.ReportAllocs()
	for b.Loop() {
		v := newValidator(st, in, tasks)
		if _, rej := v.validate(context.Background(), out.proposals[0]); rej != nil {
			b.Fatal(rej.Reason)
		}
	}
}
