"""Tests of whale_sft with a toy tokenizer and a tiny torch model.

Run: python3 -m unittest discover -s jobs/trainers -p 'test_*.py'
(needs PyTorch, and jinja2 for the chat-template tests:
apt-get install -y python3-torch python3-jinja2).
"""

import copy
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "testdata")]

import torch  # noqa: E402

import whale_sft  # noqa: E402
from toy import JinjaTokenizer, TinyLM, ToyTokenizer  # noqa: E402

try:
    import jinja2  # noqa: F401  (what transformers renders chat templates with)
    NO_JINJA = None
except ImportError:
    NO_JINJA = "no jinja2 (apt-get install -y python3-jinja2)"
    if os.environ.get("CI") == "true":
        raise

IGNORE = whale_sft.IGNORE


def chat(n=0, second_trained=True):
    return whale_sft.check_example({
        "example_id": f"ex{n}",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": f"what is {n}+1?"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"x": n})}}]},
            {"role": "tool", "content": str(n + 1), "tool_call_id": "c1"},
            {"role": "assistant", "content": f"<answer>{n + 1}</answer>"},
        ],
        "train_mask": [False, False, True, False, second_trained],
    }, "test")


class MaskTest(unittest.TestCase):
    def setUp(self):
        self.tok = ToyTokenizer()

    def trained_text(self, feat):
        ids = [i for i, l in zip(feat["input_ids"], feat["labels"]) if l != IGNORE]
        for i, l in zip(feat["input_ids"], feat["labels"]):
            if l != IGNORE:
                self.assertEqual(i, l, "a trained label must be its input token")
        return self.tok.decode(ids)

    def test_only_assistant_tokens_carry_loss(self):
        for second in (True, False):
            ex = chat(3, second_trained=second)
            feat = whale_sft.features(ex, self.tok)
            full = self.tok.apply_chat_template(ex["messages"])
            self.assertEqual(self.tok.decode(feat["input_ids"]), full, "the pieces rebuild the whole chat")
            want = '<tool_call>{"name": "calc", "arguments": "{\\"x\\": 3}"}</tool_call><|im_end|>\n'
            if second:
                want += "<answer>4</answer><|im_end|>\n"
            self.assertEqual(self.trained_text(feat), want)
            # The role header, the user, system and tool turns are masked.
            self.assertNotIn("assistant", self.trained_text(feat))
            self.assertNotIn("what is", self.trained_text(feat))

    def test_truncation_and_nothing_left(self):
        ex = chat(1)
        feat = whale_sft.features(ex, self.tok, max_length=20)
        self.assertIsNone(feat, "the first 20 tokens hold no assistant text")
        feat = whale_sft.features(ex, self.tok, max_length=70)
        self.assertEqual(len(feat["input_ids"]), 70)
        self.assertGreater(whale_sft.trained_tokens(feat), 0)

    def test_template_rewriting_history_is_refused(self):
        class Rewriting(ToyTokenizer):
            def apply_chat_template(self, messages, **kw):
                # Like templates that drop earlier reasoning: older
                # assistant turns lose their content.
                msgs = [dict(m, content="") if m["role"] == "assistant" and i < len(messages) - 1 else m
                        for i, m in enumerate(messages)]
                return super().apply_chat_template(msgs, **kw)
        ex = whale_sft.check_example({"messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "b"}],
            "train_mask": [False, True, False, True]}, "t")
        with self.assertRaisesRegex(whale_sft.DataError, "not prefix-consistent at message 2"):
            whale_sft.features(ex, Rewriting())


    def test_no_reasoning_is_unchanged(self):
        # The pieces of a chat without reasoning, as before reasoning was
        # supported; train_reasoning changes nothing.
        ex = chat(3)
        want = [
            ("<|im_start|>system\nbe brief<|im_end|>\n", False),
            ("<|im_start|>user\nwhat is 3+1?<|im_end|>\n", False),
            ("<|im_start|>assistant\n", False),
            ('<tool_call>{"name": "calc", "arguments": "{\\"x\\": 3}"}</tool_call><|im_end|>\n', True),
            ("<|im_start|>tool\n4<|im_end|>\n", False),
            ("<|im_start|>assistant\n", False),
            ("<answer>4</answer><|im_end|>\n", True),
        ]
        self.assertEqual(whale_sft.segments(ex, self.tok), want)
        self.assertEqual(whale_sft.segments(ex, self.tok, train_reasoning=False), want)
        self.assertEqual(whale_sft.features(ex, self.tok, train_reasoning=False), whale_sft.features(ex, self.tok))


def template(name):
    with open(os.path.join(HERE, "testdata", name)) as f:
        return f.read()


# A ChatML template that has no notion of reasoning.
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def call(i, name, args):
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@unittest.skipIf(NO_JINJA, NO_JINJA)
class ExactTokensTest(unittest.TestCase):
    """Examples whose assistant messages carry the server's token ids are
    trained on exactly those tokens."""

    def example(self, second_ids=True, mask=(False, True, False, True)):
        msgs = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "prompt_token_ids": [1, 2, 3], "token_ids": [4, 5],
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "r", "tool_call_id": "c1"},
            {"role": "assistant", "content": "a", "prompt_token_ids": [6, 7], "token_ids": [8, 9]},
        ]
        if not second_ids:
            del msgs[3]["token_ids"]
        return whale_sft.check_example({"example_id": "e", "messages": msgs, "train_mask": list(mask)}, "test")

    def test_ids_are_trained_as_given(self):
        feat = whale_sft.features(self.example(), ToyTokenizer())
        self.assertEqual(feat["input_ids"], [1, 2, 3, 4, 5, 6, 7, 8, 9])
        self.assertEqual(feat["labels"], [IGNORE] * 3 + [4, 5] + [IGNORE] * 2 + [8, 9])
        feat = whale_sft.features(self.example(mask=(False, False, False, True)), ToyTokenizer())
        self.assertEqual(feat["labels"], [IGNORE] * 7 + [8, 9])

    def test_missing_ids_fall_back_to_the_text(self):
        ex = self.example(second_ids=False)
        self.assertNotIn("token_ids", ex)
        tok = ToyTokenizer()
        feat = whale_sft.features(ex, tok)
        self.assertEqual(tok.decode(feat["input_ids"]), tok.apply_chat_template(ex["messages"]))

    def test_bad_ids_are_refused(self):
        ex = {"example_id": "e", "messages": [{"role": "user", "content": "q"},
              {"role": "assistant", "content": "a", "prompt_token_ids": [1], "token_ids": ["x"]}], "train_mask": [False, True]}
        with self.assertRaisesRegex(whale_sft.DataError, "message 1: token_ids: want a list of token ids"):
            whale_sft.check_example(ex, "test")


class ReasoningTest(unittest.TestCase):
    """Reasoning rendered by testdata/qwen3_like.jinja, which treats
    reasoning_content the way Qwen3's chat template does."""

    def setUp(self):
        self.tok = JinjaTokenizer(template("qwen3_like.jinja"))

    def split(self, feat):
        """The trained and the untrained text of feat (the toy tokenizer's
        tokens are characters or whole special tokens)."""
        trained = self.tok.decode([i for i, l in zip(feat["input_ids"], feat["labels"]) if l != IGNORE])
        masked = self.tok.decode([i for i, l in zip(feat["input_ids"], feat["labels"]) if l == IGNORE])
        return trained, masked

    def native(self, parallel=False):
        calls = [call(1, "search", {"q": "capital of France"})]
        results = [{"role": "tool", "content": "Paris is the capital.", "tool_call_id": "c1"}]
        if parallel:
            calls.append(call(2, "search", {"q": "river of Paris"}))
            results.append({"role": "tool", "content": "The Seine.", "tool_call_id": "c2"})
        return whale_sft.check_example({
            "example_id": "native",
            "messages": [
                {"role": "system", "content": "use the tools"},
                {"role": "user", "content": "what is the capital of France?"},
                {"role": "assistant", "content": "", "tool_calls": calls,
                 "reasoning": "I should search for it."},
                *results,
                {"role": "assistant", "content": "<answer>Paris</answer>",
                 "reasoning": "\nThe result says Paris.\n"},
            ],
            "train_mask": [False, False, True, *[False] * len(results), True],
        }, "test")

    def test_native_tools_keep_reasoning(self):
        for parallel in (False, True):
            ex = self.native(parallel)
            full = self.tok.apply_chat_template(ex["messages"])
            self.assertIn("<think>\nI should search for it.\n</think>", full,
                          "inside a tool-call chain the template keeps the earlier reasoning")
            calls = '<tool_call>\n{"name": "search", "arguments": {"q": "capital of France"}}\n</tool_call>'
            if parallel:
                calls += '\n<tool_call>\n{"name": "search", "arguments": {"q": "river of Paris"}}\n</tool_call>'
            def turns(r1, r2):
                return (f"<think>\n{r1}\n</think>\n\n" + calls + "<|im_end|>\n"
                        f"<think>\n{r2}\n</think>\n\n<answer>Paris</answer><|im_end|>\n")
            r1, r2 = "I should search for it.", "The result says Paris."
            for train_reasoning in (True, False):
                with self.subTest(parallel=parallel, train_reasoning=train_reasoning):
                    feat = whale_sft.features(ex, self.tok, train_reasoning=train_reasoning)
                    self.assertEqual(self.tok.decode(feat["input_ids"]), full, "the pieces rebuild the whole chat")
                    trained, masked = self.split(feat)
                    if train_reasoning:
                        self.assertEqual(trained, turns(r1, r2))
                    else:
                        # The reasoning stays in the context, out of the loss.
                        self.assertEqual(trained, turns("", ""))
                        self.assertIn(r1, masked)
                        self.assertIn(r2, masked)
                    for untrained in ("use the tools", "capital of France?", "<tool_response>", "Paris is",
                                      "Seine", "<|im_start|>"):
                        self.assertNotIn(untrained, trained)
            # Reasoning carries loss by default; masking it removes exactly its tokens.
            n1 = whale_sft.trained_tokens(whale_sft.features(ex, self.tok))
            n0 = whale_sft.trained_tokens(whale_sft.features(ex, self.tok, train_reasoning=False))
            self.assertEqual(n1 - n0, len(r1) + len(r2))

    def test_tag_based_tools_are_refused(self):
        # The observation comes back as a user message: the template drops
        # the first turn's reasoning once it follows, as it did at rollout.
        ex = whale_sft.check_example({
            "example_id": "tagged",
            "messages": [
                {"role": "user", "content": "what is the capital of France?"},
                {"role": "assistant", "content": "<search>capital of France</search>",
                 "reasoning": "I should search for it."},
                {"role": "user", "content": "<information>Paris is the capital.</information>"},
                {"role": "assistant", "content": "<answer>Paris</answer>", "reasoning": "It says Paris."},
            ],
            "train_mask": [False, True, False, True],
        }, "test")
        for train_reasoning in (True, False):
            with self.assertRaises(whale_sft.DataError) as cm:
                whale_sft.features(ex, self.tok, train_reasoning=train_reasoning)
            msg = str(cm.exception)
            for want in ("'tagged'", "not prefix-consistent at message 2 (user)",
                         "changed the text of message 1 (assistant)", "inside a tool-call chain",
                         "comes back as a user message", "tag-based tools", "native tools", "WHALE_CHAT_TEMPLATE"):
                self.assertIn(want, msg)
        # Without reasoning the same episode renders history verbatim.
        for m in ex["messages"]:
            m.pop("reasoning_content", None)
        self.assertIsNotNone(whale_sft.features(ex, self.tok))
        # An observation that is exactly a <tool_response> block does not
        # count as a query for Qwen3, so its reasoning is kept.
        ex = whale_sft.check_example({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "<tool_call>x</tool_call>", "reasoning": "r1"},
            {"role": "user", "content": "<tool_response>y</tool_response>"},
            {"role": "assistant", "content": "a", "reasoning": "r2"}],
            "train_mask": [False, True, False, True]}, "t")
        trained, _ = self.split(whale_sft.features(ex, self.tok))
        self.assertEqual(trained, "<think>\nr1\n</think>\n\n<tool_call>x</tool_call><|im_end|>\n"
                                  "<think>\nr2\n</think>\n\na<|im_end|>\n")

    def test_template_ignoring_reasoning_is_refused(self):
        ex = self.native()
        for tok in (JinjaTokenizer(CHATML), ToyTokenizer()):
            for train_reasoning in (True, False):
                with self.assertRaisesRegex(
                        whale_sft.DataError,
                        r"example 'native': message 2 \(assistant\) has reasoning, but the chat template "
                        r"renders nothing of reasoning_content: training would drop what the model generated"):
                    whale_sft.features(ex, tok, train_reasoning=train_reasoning)
        # An untrained assistant message's reasoning counts as well: it is
        # the context later turns were generated from.
        ex["train_mask"][2] = False
        with self.assertRaisesRegex(whale_sft.DataError, "message 2 \\(assistant\\) has reasoning"):
            whale_sft.features(ex, JinjaTokenizer(CHATML))

    def test_no_reasoning_with_the_template(self):
        ex = self.native()
        for m in ex["messages"]:
            m.pop("reasoning_content", None)
        full = self.tok.apply_chat_template(ex["messages"])
        self.assertNotIn("<think>", full)
        feat = whale_sft.features(ex, self.tok)
        self.assertEqual(feat, whale_sft.features(ex, self.tok, train_reasoning=False))
        self.assertEqual(self.tok.decode(feat["input_ids"]), full)
        trained, _ = self.split(feat)
        self.assertEqual(trained, '<tool_call>\n{"name": "search", "arguments": {"q": "capital of France"}}\n'
                                  '</tool_call><|im_end|>\n<answer>Paris</answer><|im_end|>\n')

    def test_history_rewrite_in_a_model_turn_is_still_refused(self):
        # Merging consecutive tool results is allowed (no model text
        # changes); a tool message that rewrites the assistant turn is not.
        class Rewriting(JinjaTokenizer):
            def apply_chat_template(self, messages, **kw):
                if messages[-1]["role"] == "tool":
                    messages = [dict(m, tool_calls=[]) if m["role"] == "assistant" else m for m in messages]
                return super().apply_chat_template(messages, **kw)
        ex = self.native()
        for m in ex["messages"]:
            m.pop("reasoning_content", None)
        with self.assertRaisesRegex(whale_sft.DataError, "at message 3 \\(tool\\): rendering it changed the text "
                                                         "of message 2 \\(assistant\\)"):
            whale_sft.features(ex, Rewriting(template("qwen3_like.jinja")))


TOOLS = [
    {"type": "function", "function": {
        "name": "search", "description": "Looks the query up on the web.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
    {"type": "function", "function": {"name": "done", "description": "Ends the episode.",
                                      "parameters": {"type": "object", "properties": {}}}},
]


class Recording(JinjaTokenizer):
    """Records the keyword arguments of every apply_chat_template call."""

    def __init__(self, chat_template):
        super().__init__(chat_template)
        self.calls = []

    def apply_chat_template(self, messages, **kw):
        self.calls.append(kw)
        return super().apply_chat_template(messages, **kw)


@unittest.skipIf(NO_JINJA, NO_JINJA)
class ToolsTest(unittest.TestCase):
    """The native tools the model was offered are rendered by the chat
    template (testdata/qwen3_like.jinja shows them in the system turn, as
    Qwen3's does) in every render, and are masked."""

    def setUp(self):
        self.tok = JinjaTokenizer(template("qwen3_like.jinja"))

    def example(self, tools=None, system=True, reasoning=True):
        msgs = [
            {"role": "user", "content": "what is the capital of France?"},
            {"role": "assistant", "content": "", "tool_calls": [call(1, "search", {"q": "capital of France"})]},
            {"role": "tool", "content": "Paris is the capital.", "tool_call_id": "c1"},
            {"role": "assistant", "content": "<answer>Paris</answer>"},
        ]
        if reasoning:
            msgs[1]["reasoning"], msgs[3]["reasoning"] = "I should search for it.", "The result says Paris."
        if system:
            msgs.insert(0, {"role": "system", "content": "use the tools"})
        ex = {"example_id": "tooled", "messages": msgs, "train_mask": [m["role"] == "assistant" for m in msgs]}
        if tools is not None:
            ex["tools"] = tools
        return whale_sft.check_example(ex, "test")

    def split(self, feat):
        trained = self.tok.decode([i for i, l in zip(feat["input_ids"], feat["labels"]) if l != IGNORE])
        masked = self.tok.decode([i for i, l in zip(feat["input_ids"], feat["labels"]) if l == IGNORE])
        return trained, masked

    def test_tools_are_in_the_system_turn_and_masked(self):
        listing = "<tools>\n" + "\n".join(json.dumps(t) for t in TOOLS) + "\n</tools>"
        for system in (True, False):
            for train_reasoning in (True, False):
                with self.subTest(system=system, train_reasoning=train_reasoning):
                    ex, plain = self.example(TOOLS, system), self.example(None, system)
                    self.assertEqual(ex["tools"], TOOLS)
                    feat = whale_sft.features(ex, self.tok, train_reasoning=train_reasoning)
                    text = self.tok.decode(feat["input_ids"])
                    self.assertEqual(text, self.tok.apply_chat_template(ex["messages"], tools=TOOLS),
                                     "the pieces rebuild the chat rendered with its tools")
                    # The tool definitions are in the system turn, before the query.
                    self.assertTrue(text.startswith("<|im_start|>system\n" + ("use the tools\n\n" if system else "")))
                    system_turn = text[:text.index("<|im_end|>")]
                    self.assertIn(listing, system_turn)
                    self.assertIn("<tool_call>", system_turn)
                    self.assertEqual(text.count("<|im_start|>system"), 1)
                    self.assertLess(text.index(listing), text.index("what is the capital"))
                    # ... and carry no loss: the trained text is that of the
                    # same chat without tools.
                    trained, masked = self.split(feat)
                    self.assertIn(listing, masked)
                    plain_feat = whale_sft.features(plain, self.tok, train_reasoning=train_reasoning)
                    self.assertEqual(trained, self.split(plain_feat)[0])
                    self.assertEqual(whale_sft.trained_tokens(feat), whale_sft.trained_tokens(plain_feat))
                    for untrained in ("<tools>", "Looks the query up", '"parameters"', "## Functions", "system"):
                        self.assertNotIn(untrained, trained)
                    # The first piece is the system turn with the tools, untrained.
                    first = whale_sft.segments(ex, self.tok, train_reasoning)[0]
                    self.assertFalse(first[1])
                    self.assertIn(listing, first[0])
        # A trained first message: the tools system turn before it is masked too.
        ex = whale_sft.check_example({"messages": [{"role": "assistant", "content": "hello"}],
                                      "train_mask": [True], "tools": TOOLS}, "t")
        trained, masked = self.split(whale_sft.features(ex, self.tok))
        self.assertEqual(trained, "hello<|im_end|>\n")
        self.assertIn(listing, masked)

    def test_every_render_gets_the_tools(self):
        # Full renders, the prefix renders for masking, the generation
        # header and the reasoning probe: all with tools=, or none without.
        for tools in (TOOLS, None, []):
            for train_reasoning in (True, False):
                for system in (True, False):
                    tok = Recording(template("qwen3_like.jinja"))
                    whale_sft.features(self.example(tools, system), tok, train_reasoning=train_reasoning)
                    # One per message, a header and a probe per reasoning turn.
                    self.assertEqual(len(tok.calls), len(self.example(None, system)["messages"]) + 4)
                    for kw in tok.calls:
                        if tools:
                            self.assertIs(kw.get("tools"), TOOLS)
                        else:
                            self.assertNotIn("tools", kw, "without tools nothing is passed")
        # Including the header of a trained first message.
        tok = Recording(template("qwen3_like.jinja"))
        whale_sft.features(whale_sft.check_example({"messages": [{"role": "assistant", "content": "a"}],
                                                    "train_mask": [True], "tools": TOOLS}, "t"), tok)
        self.assertTrue(tok.calls and all(kw.get("tools") is TOOLS for kw in tok.calls))

    def test_without_tools_nothing_changes(self):
        for tools in (None, []):
            ex = self.example(tools)
            self.assertNotIn("tools", ex)
            self.assertEqual(ex, self.example())
        ex = self.example()
        full = self.tok.apply_chat_template(ex["messages"])
        self.assertNotIn("<tools>", full)
        self.assertTrue(full.startswith("<|im_start|>system\nuse the tools<|im_end|>\n<|im_start|>user\n"))
        feat = whale_sft.features(ex, self.tok)
        self.assertEqual(self.tok.decode(feat["input_ids"]), full)
        # The toy ChatML chat of MaskTest, with tools=[]: the same pieces.
        plain = chat(3)
        raw = {"example_id": "ex3", "messages": [dict(m) for m in plain["messages"]],
               "train_mask": plain["train_mask"], "tools": []}
        self.assertEqual(whale_sft.check_example(raw, "t"), plain)

    def test_template_without_tools_support(self):
        # A template that ignores tools (the toy ChatML one): what vLLM
        # would have rendered with it too; trained as without tools.
        tok = ToyTokenizer()
        ex = whale_sft.check_example({"messages": chat(2)["messages"], "train_mask": chat(2)["train_mask"],
                                      "tools": TOOLS}, "t")
        self.assertEqual(whale_sft.features(ex, tok), whale_sft.features(chat(2), tok))


class LossTest(unittest.TestCase):
    def test_token_normalised(self):
        torch.manual_seed(0)
        labels = torch.tensor([[IGNORE, 5, 6, IGNORE], [IGNORE, 7, IGNORE, IGNORE]])
        logits = torch.randn(2, 4, 10)
        s, n = whale_sft.masked_nll_sum(logits, labels)
        self.assertEqual(n, 3)
        lp = torch.log_softmax(logits, -1)
        # logits at t predict labels at t+1.
        terms = [-lp[0, 0, 5], -lp[0, 1, 6], -lp[1, 0, 7]]
        self.assertAlmostEqual(float(s) / n, float(sum(terms)) / 3, places=5)
        per_example = (float(terms[0] + terms[1]) / 2 + float(terms[2])) / 2
        self.assertNotAlmostEqual(float(s) / n, per_example, places=3,
                                  msg="the loss is a mean over tokens, not over examples")

    def test_masked_positions_get_no_gradient(self):
        labels = torch.tensor([[IGNORE, IGNORE, 4, IGNORE, 2]])
        logits = torch.randn(1, 5, 8, requires_grad=True)
        s, n = whale_sft.masked_nll_sum(logits, labels)
        (s / n).backward()
        g = logits.grad[0].abs().sum(-1)
        # Position t is trained iff labels[t+1] is.
        self.assertEqual([bool(x > 0) for x in g], [False, True, False, True, False])


class TrainTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.tok = ToyTokenizer()
        self.feats = [whale_sft.features(chat(i), self.tok) for i in range(6)]

    def test_one_step_lowers_the_loss(self):
        model = TinyLM(len(self.tok))
        before = whale_sft.evaluate_loss(model, self.feats, 0, "cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = whale_sft.train_epoch(model, opt, self.feats, batch_size=6, micro_batch_size=2,
                                       pad_id=0, device="cpu", log=lambda *_: None)
        after = whale_sft.evaluate_loss(model, self.feats, 0, "cpu")
        self.assertEqual(len(losses), 1)
        self.assertAlmostEqual(losses[0], before, places=4, msg="the step's loss is the loss before it")
        self.assertLess(after, before)

    def test_micro_batches_and_ranks_give_the_same_gradient(self):
        """Split over 2 ranks × micro-batches, the averaged gradient equals
        the gradient of one process over the whole step."""
        base = TinyLM(len(self.tok))
        feats = self.feats[:5]

        class Grab:
            def __init__(self, model):
                self.model, self.grads = model, None

            def zero_grad(self, set_to_none=True):
                self.model.zero_grad(set_to_none=set_to_none)

            def step(self):
                self.grads = [p.grad.clone() for p in self.model.parameters()]

        def run(rank, world, micro, all_reduce=None):
            m = copy.deepcopy(base)
            g = Grab(m)
            whale_sft.train_epoch(m, g, feats, batch_size=5, micro_batch_size=micro, pad_id=0,
                                  device="cpu", rank=rank, world=world, max_grad_norm=0,
                                  log=lambda *_: None, all_reduce=all_reduce)
            return g.grads

        single = run(0, 1, 5)
        ranks = [run(r, 2, 1) for r in (0, 1)]
        for a, b0, b1 in zip(single, *ranks):
            torch.testing.assert_close(a, (b0 + b1) / 2, rtol=1e-4, atol=1e-6)


    def train_toy(self, micro, epochs=2, batch=4, lr=1e-2, autocast=None, **kw):
        torch.manual_seed(0)
        model = TinyLM(len(self.tok))
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        losses = whale_sft.train(model, opt, self.feats, batch_size=batch, micro_batch_size=micro, pad_id=0,
                                 device="cpu", epochs=epochs, seed=1, log=lambda *_: None,
                                 autocast_dtype=autocast, **kw)
        return model, opt, losses

    def test_accumulated_micro_batches_equal_one_big_batch(self):
        # 6 examples, batch 4 (a step of 4 and one of 2), 2 epochs: the
        # same steps whether a step is one forward or accumulated over 2
        # or 4 micro-batches.
        big, _, want = self.train_toy(micro=4)
        self.assertEqual(len(want), 4)
        for micro in (1, 3):
            model, _, losses = self.train_toy(micro=micro)
            for a, b in zip(losses, want):
                self.assertAlmostEqual(a, b, places=5)
            for p, q in zip(model.parameters(), big.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)

    def test_bf16_autocast_keeps_float32_weights(self):
        # At the paper's learning rates an update is far below a bfloat16
        # weight's resolution; the weights stay float32, the forwards run
        # in bfloat16.
        torch.manual_seed(0)
        init = TinyLM(len(self.tok)).state_dict()
        model, _, losses = self.train_toy(micro=2, epochs=1, lr=1e-7, autocast=torch.bfloat16)
        _, _, fp32 = self.train_toy(micro=2, epochs=1, lr=1e-7)
        for name, p in model.state_dict().items():
            self.assertEqual(p.dtype, torch.float32)
            self.assertFalse(torch.equal(p, init[name]), f"{name} did not move at lr 1e-7")
            moved = p.to(torch.bfloat16).float() != init[name].to(torch.bfloat16).float()
            self.assertLess(moved.float().mean().item(), 0.05, "in bfloat16 an update this small is lost")
        self.assertAlmostEqual(losses[0], fp32[0], delta=0.05)
        self.assertNotEqual(losses[0], fp32[0], "the forwards ran in bfloat16")

    def test_start_step_skips_the_steps_done(self):
        model, _, want = self.train_toy(micro=2)
        # after_step sees every step; a run of one epoch (steps 1-2), then
        # resumed at step 2 for two epochs, ends as the whole run did.
        calls = []
        self.train_toy(micro=2, after_step=lambda s, l: calls.append((s, list(l))))
        self.assertEqual(calls, [(s, want[:s]) for s in (1, 2, 3, 4)])
        torch.manual_seed(0)
        m = TinyLM(len(self.tok))
        o = torch.optim.AdamW(m.parameters(), lr=1e-2)
        whale_sft.train(m, o, self.feats, batch_size=4, micro_batch_size=2, pad_id=0, device="cpu", epochs=1,
                        seed=1, log=lambda *_: None)
        losses = whale_sft.train(m, o, self.feats, batch_size=4, micro_batch_size=2, pad_id=0, device="cpu",
                                 epochs=2, seed=1, log=lambda *_: None, start_step=2, losses=want[:2])
        self.assertEqual(losses, want)
        for p, q in zip(m.parameters(), model.parameters()):
            self.assertTrue(torch.equal(p, q))

    def test_an_epoch_is_every_example_once(self):
        feats = [{"input_ids": [i, i], "labels": [i, i]} for i in range(7)]
        steps = list(whale_sft.run_batches(feats, 3, 2, seed=5))
        self.assertEqual([len(b) for b in steps], [3, 3, 1, 3, 3, 1])
        for epoch in (steps[:3], steps[3:]):
            self.assertEqual(sorted(f["input_ids"][0] for b in epoch for f in b), list(range(7)))
        self.assertNotEqual(steps[0], steps[3], "each epoch has its own order")
        self.assertEqual(steps, list(whale_sft.run_batches(feats, 3, 2, seed=5)), "and the same on a rerun")

    def test_every_rank_runs_as_many_micro_batches(self):
        batch = self.feats[:5]
        for world, micro in ((2, 1), (2, 2), (4, 1), (8, 1), (3, 2)):
            with self.subTest(world=world, micro=micro):
                got = [whale_sft.micro_batches(batch, r, world, micro) for r in range(world)]
                self.assertEqual(len({len(g) for g in got}), 1)
                real = [f for g in got for mb in g for f in mb if whale_sft.trained_tokens(f)]
                self.assertEqual(sorted(map(id, real)), sorted(map(id, batch)), "each example once")
                self.assertTrue(all(len(mb) <= micro for g in got for mb in g))


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, self.dir)
        torch.manual_seed(0)
        self.tok = ToyTokenizer()
        self.feats = [whale_sft.features(chat(i), self.tok) for i in range(4)]

    def state(self):
        torch.manual_seed(0)
        m = TinyLM(len(self.tok))
        o = torch.optim.AdamW(m.parameters(), lr=1e-2)
        return m, o

    def test_save_and_load(self):
        m, o = self.state()
        whale_sft.train(m, o, self.feats, batch_size=2, micro_batch_size=1, pad_id=0, device="cpu",
                        log=lambda *_: None)
        r = whale_sft.Resume(os.path.join(self.dir, "r"), "fp1", log=lambda *_: None)
        r.save(1, m, o, [3.5])
        r.save(2, m, o, [3.5, 2.5])
        self.assertEqual(os.listdir(r.dir), ["step-00000002"])
        # A half-written checkpoint (no meta.json, or still .tmp) is not used.
        os.makedirs(os.path.join(r.dir, "step-00000003"))
        os.makedirs(os.path.join(r.dir, "step-00000004.tmp"))
        torch.rand(3)  # the RNG moves on; resuming puts it back
        m2, o2 = self.state()
        self.assertEqual(r.load(m2, o2), (2, [3.5, 2.5]))
        for p, q in zip(m.parameters(), m2.parameters()):
            self.assertTrue(torch.equal(p, q))
        self.assertEqual(str(o.state_dict()), str(o2.state_dict()))
        # Other inputs: not resumed, and removed.
        logs = []
        other = whale_sft.Resume(r.dir, "fp2", log=logs.append)
        self.assertEqual(other.load(*self.state()), (0, []))
        self.assertIn("other data or settings", logs[0])
        self.assertEqual(os.listdir(r.dir), [])
        other.clear()
        self.assertFalse(os.path.exists(r.dir))

    def test_a_checkpoint_of_another_model_is_refused(self):
        m, o = self.state()
        r = whale_sft.Resume(self.dir, "fp", log=lambda *_: None)
        r.save(1, m, o, [1.0])
        small = TinyLM(len(self.tok), dim=8)
        for p in small.emb.parameters():
            p.requires_grad_(False)
        with self.assertRaisesRegex(whale_sft.DataError, r"state.pt: its parameters are not this model's trainable "
                                                         r"ones \(missing \[\], unexpected \['emb.weight'\]\)"):
            r.load(small, torch.optim.AdamW(small.out.parameters()))

    def test_fingerprint_and_base_identity(self):
        fp = whale_sft.fingerprint(self.feats, {"lr": 1e-6})
        self.assertEqual(fp, whale_sft.fingerprint(copy.deepcopy(self.feats), {"lr": 1e-6}))
        self.assertNotEqual(fp, whale_sft.fingerprint(self.feats, {"lr": 1e-7}))
        self.assertNotEqual(fp, whale_sft.fingerprint(self.feats[:3], {"lr": 1e-6}))
        masked = copy.deepcopy(self.feats)
        masked[0]["labels"][-1] = IGNORE
        self.assertNotEqual(fp, whale_sft.fingerprint(masked, {"lr": 1e-6}))
        # Two checkpoints of one model, same sizes, other weights: told
        # apart; the same files under another path (the stage's next
        # attempt): the same.
        dirs = []
        for name, fill in (("a", 1), ("b", 2), ("c", 1)):
            d = os.path.join(self.dir, name)
            os.makedirs(d)
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(b"header" + bytes([fill]) * 300000)
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write("{}")
            dirs.append(whale_sft.base_identity(d))
        self.assertNotEqual(dirs[0], dirs[1])
        self.assertEqual(dirs[0], dirs[2])
        self.assertEqual(whale_sft.base_identity("Qwen/Qwen3-4B"), "Qwen/Qwen3-4B")


class DataTest(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("\n".join(lines) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_jsonl_errors_name_the_line(self):
        good = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                           "train_mask": [False, True]})
        cases = [
            ("{not json", ":2: not JSON"),
            (json.dumps({"messages": [{"role": "user", "content": "q"}], "train_mask": [True]}),
             ":2: message 0: train_mask is true on a 'user' message"),
            (json.dumps({"messages": [{"role": "user", "content": "q"}], "train_mask": []}),
             ":2: train_mask has 0 entries for 1 messages"),
        ]
        for bad, want in cases:
            path = self.write([good, bad])
            with self.assertRaises(whale_sft.DataError) as cm:
                list(whale_sft.iter_jsonl(path))
            self.assertIn(path + want, str(cm.exception))

    def test_reasoning_is_read(self):
        path = self.write([json.dumps({"messages": [
            {"role": "user", "content": "q", "reasoning": None},
            {"role": "assistant", "content": "a", "reasoning": "because"},
            {"role": "assistant", "content": "b", "reasoning": " \n"}],
            "train_mask": [False, True, True]})])
        msgs = whale_sft.load_examples({"WHALE_SFT_JSONL": path})[0]["messages"]
        # Passed to the template under the key Qwen3's reads; blank is none.
        self.assertEqual(msgs[1], {"role": "assistant", "content": "a", "reasoning_content": "because"})
        self.assertNotIn("reasoning_content", msgs[2])
        self.assertNotIn("reasoning_content", msgs[0])
        cases = [
            ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning": ["x"]}],
             "w: message 1: reasoning is a list, want a string"),
            ([{"role": "user", "content": "q", "reasoning": "x"}, {"role": "assistant", "content": "a"}],
             "w: message 0: reasoning on a 'user' message"),
        ]
        for m, want in cases:
            with self.assertRaises(whale_sft.DataError) as cm:
                whale_sft.check_example({"messages": m, "train_mask": [False, True]}, "w")
            self.assertIn(want, str(cm.exception))

    def test_tools_are_read_and_checked(self):
        good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                "train_mask": [False, True], "example_id": "e1"}
        path = self.write([json.dumps(good), json.dumps(dict(good, tools=TOOLS)), json.dumps(dict(good, tools=None))])
        exs = whale_sft.load_examples({"WHALE_SFT_JSONL": path})
        self.assertEqual([e.get("tools") for e in exs], [None, TOOLS, None])
        self.assertNotIn("tools", exs[0])
        bad = [
            ('"search"', "tools is a str, want a list"),
            ('{"type": "function"}', "tools is a dict, want a list"),
            ('["search"]', "tools[0] is a str, want an object"),
            ('[{"type": "function"}]', "tools[0] has no function name"),
            ('[{"type": "function", "function": {"name": "ok"}}, {"name": "flat"}]', "tools[1] has no function name"),
            ('[{"type": "function", "function": {"name": ""}}]', "tools[0] has no function name"),
            ('[{"type": "function", "function": {"name": 3}}]', "tools[0] has no function name"),
        ]
        for tools, want in bad:
            with self.subTest(tools=tools):
                path = self.write([json.dumps(good), json.dumps(dict(good, tools=json.loads(tools)))])
                with self.assertRaises(whale_sft.DataError) as cm:
                    list(whale_sft.iter_jsonl(path))
                msg = str(cm.exception)
                self.assertIn(f"{path}:2 (example 'e1'): {want}", msg)
                self.assertIn('{"type": "function", "function": {"name": ...}}', msg)

    def test_parquet_tools_column(self):
        # pyarrow is not installed here: the columns read and the row
        # conversion are tested without it.
        old = ["example_id", "episode_id", "task_id", "messages", "train_mask"]
        self.assertEqual(whale_sft.parquet_columns(old), old)
        self.assertEqual(whale_sft.parquet_columns(old + ["tools"]), old + ["tools"])
        row = {"example_id": "e", "episode_id": "ep", "task_id": "t", "train_mask": [False, True],
               "messages": [{"role": "user", "content": "q", "name": "", "tool_call_id": "", "tool_calls": [],
                             "reasoning": ""},
                            {"role": "assistant", "content": "", "name": "", "tool_call_id": "", "reasoning": "",
                             "tool_calls": [{"id": "c1", "name": "search", "arguments": '{"q": "x"}'}]}]}
        ex = whale_sft.parquet_example(dict(row, tools=json.dumps(TOOLS)), "p row 0")
        self.assertEqual(ex["tools"], TOOLS)
        self.assertEqual(ex["messages"][1]["tool_calls"][0]["function"], {"name": "search", "arguments": '{"q": "x"}'})
        # "" (no tools), null, and a file without the column: no tools.
        plain = whale_sft.parquet_example(row, "p row 0")
        self.assertNotIn("tools", plain)
        for none in ("", None, "  "):
            self.assertEqual(whale_sft.parquet_example(dict(row, tools=none), "p row 0"), plain)
        for tools, want in (("[{", "p row 3 (example 'e'): tools is not JSON"),
                            (TOOLS, "p row 3 (example 'e'): the tools column holds a list, want JSON text"),
                            ('{"name": "search"}', "p row 3 (example 'e'): tools is a dict, want a list"),
                            ('[{"name": "search"}]', "p row 3 (example 'e'): tools[0] has no function name")):
            with self.subTest(tools=tools):
                with self.assertRaises(whale_sft.DataError) as cm:
                    whale_sft.parquet_example(dict(row, tools=tools), "p row 3")
                self.assertIn(want, str(cm.exception))

    def test_load_from_env(self):
        path = self.write(["", json.dumps({"messages": [{"role": "assistant", "content": "a",
                                                         "tool_calls": [{"id": "1", "name": "f", "arguments": "{}"}]}],
                                           "train_mask": [True], "example_id": "e"})])
        exs = whale_sft.load_examples({"WHALE_SFT_JSONL": path})
        self.assertEqual(len(exs), 1)
        # The Parquet row layout of tool calls is turned into the OpenAI one.
        self.assertEqual(exs[0]["messages"][0]["tool_calls"][0]["function"], {"name": "f", "arguments": "{}"})
        with self.assertRaises(whale_sft.DataError):
            whale_sft.load_examples({})


if __name__ == "__main__":
    unittest.main()
