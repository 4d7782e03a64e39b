package searchqa

import (
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/harnesstest"
)

func TestContractValidates(t *testing.T) {
	c := Contract()
	harnesstest.CheckDoc(t, c)
	k, ok := c.Const("MAX_TURNS")
	if !ok || k.Default != 2 || k.Min == nil || k.Max == nil {
		t.Errorf("MAX_TURNS: %+v", k)
	}
}

func TestContractHelpers(t *testing.T) {
	harnesstest.RunHelperCases(t, Contract(), []harnesstest.HelperCase{
		harnesstest.H("answer", `extract_answer(obs["text"])`, map[string]any{"text": "<answer>Paris</answer> no, <answer> Lyon </answer>"}, `"Lyon"`, ""),
		harnesstest.H("no answer", `extract_answer("I think Paris")`, nil, `null`, ""),
		harnesstest.H("unclosed falls back", `extract_answer("<answer>a</answer><answer>b")`, nil, `"a"`, ""),
		harnesstest.H("normalize", `normalize_answer(obs["s"])`, map[string]any{"s": "The  Eiffel Tower!"}, `"eiffel tower"`, ""),
		harnesstest.H("normalize of extract", `normalize_answer(s=extract_answer("<answer>An Apple.</answer>"))`, nil, `"apple"`, ""),
		harnesstest.H("not a string", `normalize_answer(None)`, nil, "", "s:"),
	})
}

func TestContractConstants(t *testing.T) {
	harnesstest.RunConstCases(t, Contract(), []harnesstest.ConstCase{
		harnesstest.C("defaults", "", "", func(h *harness.Harness) bool {
			return h.Int("MAX_TURNS") == 2 && h.Int("TOPK") == 3 && h.Int("MAX_DOC_CHARS") == 2000
		}),
		harnesstest.C("set", "TOPK = 50\nMAX_DOC_CHARS = 300\n", "", func(h *harness.Harness) bool {
			return h.Int("TOPK") == 50 && h.Int("MAX_DOC_CHARS") == 300
		}),
		harnesstest.C("topk too large", "TOPK = 51\n", "TOPK", nil),
		harnesstest.C("topk zero", "TOPK = 0\n", "TOPK", nil),
		harnesstest.C("topk not int", "TOPK = \"3\"\n", "TOPK", nil),
	})
}
