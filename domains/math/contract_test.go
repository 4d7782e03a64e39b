package mathdomain

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
		harnesstest.H("boxed", `extract_boxed(obs["text"])`, map[string]any{"text": `so \boxed{12} then \boxed{ \frac{1}{2} }`}, `"\\frac{1}{2}"`, ""),
		harnesstest.H("no box", `extract_boxed("the answer is 3")`, nil, `null`, ""),
		harnesstest.H("unclosed last box", `extract_boxed("\\boxed{1} and \\boxed{2")`, nil, `null`, ""),
		harnesstest.H("normalize", `normalize_answer(obs["s"])`, map[string]any{"s": `\dfrac{1}{2}`}, `"\\frac{1}{2}"`, ""),
		harnesstest.H("normalize number", `normalize_answer("+05.50")`, nil, `"5.5"`, ""),
		harnesstest.H("normalize of extract", `normalize_answer(extract_boxed(text="\\boxed{3.0}"))`, nil, `"3"`, ""),
		harnesstest.H("not a string", `extract_boxed(3)`, nil, "", "text"),
	})
}

func TestContractConstants(t *testing.T) {
	harnesstest.RunConstCases(t, Contract(), []harnesstest.ConstCase{
		harnesstest.C("defaults", "", "", func(h *harness.Harness) bool {
			return h.Int("MAX_TURNS") == 2 && h.Bool("CODE_TOOL") && h.Int("MAX_OUTPUT_CHARS") == 2000
		}),
		harnesstest.C("set", "CODE_TOOL = False\nMAX_OUTPUT_CHARS = 500\n", "", func(h *harness.Harness) bool {
			return !h.Bool("CODE_TOOL") && h.Int("MAX_OUTPUT_CHARS") == 500
		}),
		harnesstest.C("code tool not bool", "CODE_TOOL = 1\n", "CODE_TOOL", nil),
		harnesstest.C("output too small", "MAX_OUTPUT_CHARS = 10\n", "MAX_OUTPUT_CHARS", nil),
	})
}
