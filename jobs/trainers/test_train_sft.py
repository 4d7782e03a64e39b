"""train_sft.main end to end on CPU, with the toy model standing in for
transformers (which is not installed on the test machines)."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "testdata")]

import fake_transformers  # noqa: E402

sys.modules.setdefault("transformers", fake_transformers)

import train_sft  # noqa: E402
import whale_sft  # noqa: E402
from toy import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


class TrainSFTTest(unittest.TestCase):
    def setUp(self):
        if sys.modules["transformers"] is not fake_transformers:
            self.skipTest("a real transformers is installed; this test drives the toy one")
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.jsonl = os.path.join(self.dir, "sft.jsonl")
        with open(self.jsonl, "w") as f:
            for i in range(8):
                f.write(json.dumps({"messages": [
                    {"role": "user", "content": f"add {i} and 1"},
                    {"role": "assistant", "content": f"<answer>{i + 1}</answer>"}],
                    "train_mask": [False, True], "example_id": f"e{i}"}) + "\n")
        self.env = {"WHALE_SFT_JSONL": self.jsonl, "WHALE_BASE_CHECKPOINT": "toy/base",
                    "WHALE_LEARNING_RATE": "0.05", "WHALE_EPOCHS": "2", "WHALE_SEED": "3",
                    "WHALE_LORA": "0", "WHALE_BATCH_SIZE": "4", "WHALE_MICRO_BATCH_SIZE": "2"}
        self.old = dict(os.environ)
        os.environ.update(self.env)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.old)

    def train(self, out, base):
        os.environ["WHALE_OUTPUT_DIR"] = out
        os.environ["WHALE_BASE_CHECKPOINT"] = base
        with contextlib.redirect_stdout(io.StringIO()):
            train_sft.main([])
        with open(os.path.join(out, "whale_train_stats.json")) as f:
            return json.load(f)

    def test_trains_saves_and_chains(self):
        out1 = os.path.join(self.dir, "out1")
        stats = self.train(out1, "toy/base")
        self.assertEqual((stats["examples"], stats["steps"], stats["lora"]), (8, 4, False))
        self.assertTrue(os.path.isfile(os.path.join(out1, "model.pt")))
        self.assertTrue(os.path.isfile(os.path.join(out1, "tokenizer_config.json")))
        self.assertLess(stats["losses"][-1], stats["losses"][0])
        # The next step starts from the saved weights.
        tok = AutoTokenizer.from_pretrained(out1)
        feats = [whale_sft.features(e, tok) for e in whale_sft.load_examples()]
        fresh = whale_sft.evaluate_loss(AutoModelForCausalLM.from_pretrained("toy/base"), feats, 0, "cpu")
        trained = whale_sft.evaluate_loss(AutoModelForCausalLM.from_pretrained(out1), feats, 0, "cpu")
        self.assertLess(trained, fresh)
        stats2 = self.train(os.path.join(self.dir, "out2"), out1)
        self.assertAlmostEqual(stats2["losses"][0], trained, delta=0.5)
        self.assertGreater(abs(stats2["losses"][0] - fresh), 0.5, "the second step did not load the first's weights")

    def test_reasoning_trained_or_masked(self):
        try:
            import jinja2  # noqa: F401
        except ImportError:
            if os.environ.get("CI") == "true":
                raise
            self.skipTest("no jinja2 (apt-get install -y python3-jinja2)")
        with open(self.jsonl, "w") as f:
            for i in range(4):
                f.write(json.dumps({"messages": [
                    {"role": "user", "content": f"add {i} and 1"},
                    {"role": "assistant", "content": f"<answer>{i + 1}</answer>", "reasoning": f"{i} plus one"}],
                    "train_mask": [False, True], "example_id": f"e{i}"}) + "\n")
        # The toy tokenizer's own template ignores reasoning: refused.
        os.environ["WHALE_OUTPUT_DIR"] = os.path.join(self.dir, "refused")
        with self.assertRaisesRegex(whale_sft.DataError, "'e0': message 1 \\(assistant\\) has reasoning"):
            train_sft.main([])
        os.environ["WHALE_CHAT_TEMPLATE"] = os.path.join(HERE, "testdata", "qwen3_like.jinja")
        tokens = {}
        for flag in ("1", "0"):
            os.environ["WHALE_TRAIN_REASONING"] = flag
            stats = self.train(os.path.join(self.dir, "out" + flag), "toy/base")
            self.assertEqual(stats["train_reasoning"], flag == "1")
            tokens[flag] = stats["trained_tokens"]
        self.assertEqual(tokens["1"] - tokens["0"], sum(len(f"{i} plus one") for i in range(4)))

    def test_tools_are_context(self):
        try:
            import jinja2  # noqa: F401
        except ImportError:
            if os.environ.get("CI") == "true":
                raise
            self.skipTest("no jinja2 (apt-get install -y python3-jinja2)")
        tools = [{"type": "function", "function": {"name": "add", "description": "Adds two numbers.",
                                                   "parameters": {"type": "object", "properties": {}}}}]

        def write(tools):
            with open(self.jsonl, "w") as f:
                for i in range(4):
                    ex = {"messages": [
                        {"role": "system", "content": "use add"},
                        {"role": "user", "content": f"add {i} and 1"},
                        {"role": "assistant", "content": f"<answer>{i + 1}</answer>"}],
                        "train_mask": [False, False, True], "example_id": f"e{i}"}
                    if tools is not None:
                        ex["tools"] = tools
                    f.write(json.dumps(ex) + "\n")

        os.environ["WHALE_CHAT_TEMPLATE"] = os.path.join(HERE, "testdata", "qwen3_like.jinja")
        stats = {}
        for name, t in (("tools", tools), ("none", None)):
            write(t)
            stats[name] = self.train(os.path.join(self.dir, "out-" + name), "toy/base")
        self.assertEqual((stats["tools"]["examples_with_tools"], stats["none"]["examples_with_tools"]), (4, 0))
        # The tool definitions are in the context, and carry no loss.
        self.assertEqual(stats["tools"]["trained_tokens"], stats["none"]["trained_tokens"])
        write(tools)
        tok = AutoTokenizer.from_pretrained("toy/base")
        with open(os.environ["WHALE_CHAT_TEMPLATE"]) as f:
            tok.chat_template = f.read()
        feat = whale_sft.features(whale_sft.load_examples()[0], tok)
        self.assertIn('<tools>\n{"type": "function", "function": {"name": "add"', tok.decode(feat["input_ids"]))
        # A malformed tools value is refused, naming the example.
        write([{"type": "function", "function": {"description": "no name"}}])
        os.environ["WHALE_OUTPUT_DIR"] = os.path.join(self.dir, "refused")
        with self.assertRaisesRegex(whale_sft.DataError, "sft.jsonl:1 \\(example 'e0'\\): tools\\[0\\] has no function name"):
            train_sft.main([])

    def test_lora_adapter_base_needs_lora(self):
        base = os.path.join(self.dir, "adapter")
        os.makedirs(base)
        with open(os.path.join(base, "adapter_config.json"), "w") as f:
            json.dump({"base_model_name_or_path": "toy/base"}, f)
        os.environ["WHALE_OUTPUT_DIR"] = os.path.join(self.dir, "out")
        os.environ["WHALE_BASE_CHECKPOINT"] = base
        with self.assertRaisesRegex(SystemExit, "LoRA adapter"):
            train_sft.main([])

    def test_required_env(self):
        os.environ.pop("WHALE_BASE_CHECKPOINT")
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            train_sft.parse_args([])
        self.assertIn("--base (or its WHALE_* variable) is required", err.getvalue())


if __name__ == "__main__":
    unittest.main()
