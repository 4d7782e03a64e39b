"""Tests of whale_sft with a toy tokenizer and a tiny torch model.

Run: python3 -m unittest discover -s jobs/trainers -p 'test_*.py'
(needs PyTorch: apt-get install -y python3-torch).
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
from toy import TinyLM, ToyTokenizer  # noqa: E402

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
        order = list(whale_sft.batches(feats, 5, 0))[0]
        total = sum(whale_sft.trained_tokens(f) for f in order)
        ranks = [run(r, 2, 1, all_reduce=lambda _n: total) for r in (0, 1)]
        for a, b0, b1 in zip(single, *ranks):
            torch.testing.assert_close(a, (b0 + b1) / 2, rtol=1e-4, atol=1e-6)


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
