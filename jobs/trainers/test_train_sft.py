"""train_sft.main end to end on CPU, with the toy model standing in for
transformers (which is not installed on the test machines)."""

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "testdata")]

import fake_peft  # noqa: E402
import fake_transformers  # noqa: E402

sys.modules.setdefault("transformers", fake_transformers)
sys.modules.setdefault("peft", fake_peft)

import torch  # noqa: E402

import train_sft  # noqa: E402
import whale_sft  # noqa: E402
from toy import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

RUN_TOY = os.path.join(HERE, "testdata", "run_toy.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(out):
    name = "adapter_model.pt" if os.path.isfile(os.path.join(out, "adapter_model.pt")) else "model.pt"
    return torch.load(os.path.join(out, name))


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

    def test_exact_token_ids_are_trained(self):
        # Rows that carry the server's token ids are trained on those ids,
        # not on a re-rendering of their text.
        with open(self.jsonl, "w") as f:
            for i in range(4):
                f.write(json.dumps({"messages": [
                    {"role": "user", "content": f"add {i} and 1"},
                    {"role": "assistant", "content": f"<answer>{i + 1}</answer>",
                     "prompt_token_ids": [5, 6, 7, 8 + i], "token_ids": [20 + i, 30, 3]}],
                    "train_mask": [False, True], "example_id": f"e{i}"}) + "\n")
        stats = self.train(os.path.join(self.dir, "ids"), "toy/base")
        self.assertEqual((stats["trained_examples"], stats["trained_tokens"]), (4, 12))

    def test_lora_ddp_and_resume(self):
        """The LoRA path with a stand-in for peft: only the adapter trains
        and is saved; two DDP ranks train what one process does; a killed
        run resumes (its checkpoint holds the adapter alone); the adapter is
        the next step's base."""
        if sys.modules["peft"] is not fake_peft:
            self.skipTest("a real peft is installed; this test drives the stand-in")
        os.environ.update(WHALE_LORA="1", WHALE_LORA_RANK="4", WHALE_LORA_ALPHA="8", WHALE_LEARNING_RATE="0.02")
        single = os.path.join(self.dir, "single")
        stats = self.train(single, "toy/base")
        self.assertTrue(stats["lora"])
        self.assertEqual(sorted(os.listdir(single)), ["adapter_config.json", "adapter_model.pt",
                                                      "tokenizer_config.json", "whale_train_stats.json"])
        self.assertEqual(sorted(weights(single)), ["base_model.out.lora_A", "base_model.out.lora_B"])
        self.assertLess(stats["losses"][-1], stats["losses"][0])

        out = os.path.join(self.dir, "ddp")
        codes, log = self.run_ranks(out, 2)
        self.assertEqual(codes, [0, 0], log)
        self.assert_same_weights(out, single)

        out = os.path.join(self.dir, "killed")
        codes, log = self.run_ranks(out, 1, {"WHALE_TEST_EXIT_AFTER_STEP": "3", "WHALE_CHECKPOINT_STEPS": "2"})
        self.assertEqual(codes, [75], log)
        state = torch.load(os.path.join(out, "whale_resume", "step-00000002", "state.pt"))
        self.assertEqual(sorted(state["model"]), ["base_model.out.lora_A", "base_model.out.lora_B"])
        again = self.train(out, "toy/base")
        self.assertEqual(again["resumed_after_step"], 2)
        self.assert_same_weights(out, single, exact=True)

        # The next step starts from the adapter (on the run's base model).
        os.environ["WHALE_BASE_MODEL"] = "toy/base"
        nxt = self.train(os.path.join(self.dir, "next"), single)
        self.assertAlmostEqual(nxt["losses"][0], stats["losses"][-1], delta=0.5)
        self.assertLess(nxt["losses"][0], stats["losses"][0] - 0.5, "the second step did not load the adapter")

    def test_lora_adapter_base_needs_lora(self):
        base = os.path.join(self.dir, "adapter")
        os.makedirs(base)
        with open(os.path.join(base, "adapter_config.json"), "w") as f:
            json.dump({"base_model_name_or_path": "toy/base"}, f)
        os.environ["WHALE_OUTPUT_DIR"] = os.path.join(self.dir, "out")
        os.environ["WHALE_BASE_CHECKPOINT"] = base
        with self.assertRaisesRegex(SystemExit, "LoRA adapter"):
            train_sft.main([])

    def run_ranks(self, out, world, extra=None, timeout=120):
        """Runs testdata/run_toy.py as world processes joined over gloo, as
        torchrun would start them (torch 1.13's torch.distributed.run does
        not run here); returns their exit codes and output."""
        env = dict(os.environ, WHALE_OUTPUT_DIR=out, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), PYTHONDONTWRITEBYTECODE="1", **(extra or {}))
        procs = []
        for rank in range(world):
            procs.append(subprocess.Popen([sys.executable, RUN_TOY], env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    if q.poll() is None:
                        q.send_signal(signal.SIGUSR1)  # run_toy.py prints its stack
                time.sleep(1)
                for q in procs:
                    q.kill()
                outs = [q.communicate()[0] for q in procs]
                self.fail(f"ranks did not finish in {timeout}s:\n" + "\n".join(outs))
        return [p.returncode for p in procs], "\n".join(outs)

    def assert_same_weights(self, a, b, exact=False):
        wa, wb = weights(a), weights(b)
        self.assertEqual(set(wa), set(wb))
        for k in wa:
            if exact:
                self.assertTrue(torch.equal(wa[k], wb[k]), f"{k} differs")
            else:
                torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5)

    def test_killed_run_resumes_to_the_same_result(self):
        # 8 examples, batch 4, 2 epochs: 4 steps; a checkpoint every 2.
        os.environ["WHALE_CHECKPOINT_STEPS"] = "2"
        whole = self.train(os.path.join(self.dir, "whole"), "toy/base")
        self.assertEqual((whole["steps"], whole["accumulation"], whole["resumed_after_step"]), (4, 2, 0))
        out = os.path.join(self.dir, "killed")
        codes, log = self.run_ranks(out, 1, {"WHALE_TEST_EXIT_AFTER_STEP": "3"})
        self.assertEqual(codes, [75], log)
        self.assertIn("checkpoint after step 2", log)
        resume = os.path.join(out, "whale_resume")
        self.assertEqual(os.listdir(resume), ["step-00000002"], "only the last complete checkpoint is kept")
        self.assertFalse(os.path.exists(os.path.join(out, "model.pt")))
        # The rerun redoes step 3 from the checkpoint after step 2 and ends
        # where the uninterrupted run did, bit for bit.
        again = self.train(out, "toy/base")
        self.assertEqual(again["resumed_after_step"], 2)
        self.assertEqual(again["losses"], whole["losses"])
        self.assert_same_weights(out, os.path.join(self.dir, "whole"), exact=True)
        self.assertFalse(os.path.exists(resume), "the checkpoints are removed once the model is saved")

    def test_checkpoint_of_other_inputs_is_not_resumed(self):
        os.environ["WHALE_CHECKPOINT_STEPS"] = "1"
        resume = os.path.join(self.dir, "scratch")
        os.environ["WHALE_RESUME_DIR"] = resume
        codes, log = self.run_ranks(os.path.join(self.dir, "killed"), 1, {"WHALE_TEST_EXIT_AFTER_STEP": "2"})
        self.assertEqual(codes, [75], log)
        self.assertEqual(os.listdir(resume), ["step-00000002"])
        # Another learning rate: the checkpoint is discarded, training
        # starts over, and the result is that of a fresh run.
        os.environ["WHALE_LEARNING_RATE"] = "0.04"
        os.environ["WHALE_OUTPUT_DIR"] = os.path.join(self.dir, "other")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            train_sft.main([])
        self.assertIn("was trained on other data or settings; starting over", buf.getvalue())
        with open(os.path.join(self.dir, "other", "whale_train_stats.json")) as f:
            self.assertEqual(json.load(f)["resumed_after_step"], 0)
        del os.environ["WHALE_RESUME_DIR"]
        os.environ["WHALE_CHECKPOINT_STEPS"] = "0"
        self.train(os.path.join(self.dir, "fresh"), "toy/base")
        self.assert_same_weights(os.path.join(self.dir, "other"), os.path.join(self.dir, "fresh"), exact=True)
        self.assertFalse(os.path.exists(resume))

    def test_ddp_two_gloo_ranks(self):
        """Two ranks (DDP over gloo) train what one process does; killed
        after step 3, they resume from their checkpoint after step 2."""
        single = self.train(os.path.join(self.dir, "single"), "toy/base")
        out = os.path.join(self.dir, "ddp")
        codes, log = self.run_ranks(out, 2)
        self.assertEqual(codes, [0, 0], log)
        with open(os.path.join(out, "whale_train_stats.json")) as f:
            ddp = json.load(f)
        self.assertEqual((ddp["world_size"], ddp["steps"], ddp["accumulation"]), (2, 4, 1))
        for a, b in zip(ddp["losses"], single["losses"]):
            self.assertAlmostEqual(a, b, places=4)
        self.assert_same_weights(out, os.path.join(self.dir, "single"))

        out = os.path.join(self.dir, "ddp-killed")
        codes, log = self.run_ranks(out, 2, {"WHALE_TEST_EXIT_AFTER_STEP": "3", "WHALE_CHECKPOINT_STEPS": "2"})
        self.assertEqual(codes, [75, 75], log)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "whale_resume", "step-00000002"))),
                         ["meta.json", "rng-0.pt", "rng-1.pt", "state.pt"])
        codes, log = self.run_ranks(out, 2, {"WHALE_CHECKPOINT_STEPS": "2"})
        self.assertEqual(codes, [0, 0], log)
        self.assertIn("resume: from", log)
        with open(os.path.join(out, "whale_train_stats.json")) as f:
            self.assertEqual(json.load(f)["resumed_after_step"], 2)
        self.assert_same_weights(out, os.path.join(self.dir, "single"))

    def test_fsdp(self):
        try:
            train_sft.fsdp_api()
        except train_sft.FSDPUnavailable as e:
            # The other paths ran without importing FSDP; asking for it
            # says what is missing.
            os.environ.update(WHALE_FSDP="1", WHALE_OUTPUT_DIR=os.path.join(self.dir, "fsdp"), WORLD_SIZE="2")
            with self.assertRaisesRegex(train_sft.FSDPUnavailable, r"WHALE_FSDP=1 needs torch >= 2\.4 .* this is torch "):
                train_sft.main([])
            self.skipTest(f"FSDP2 is not in this torch: {e}")
        single = self.train(os.path.join(self.dir, "single"), "toy/base")
        out = os.path.join(self.dir, "fsdp")
        codes, log = self.run_ranks(out, 2, {"WHALE_FSDP": "1"})
        self.assertEqual(codes, [0, 0], log)
        with open(os.path.join(out, "whale_train_stats.json")) as f:
            stats = json.load(f)
        self.assertTrue(stats["fsdp"])
        for a, b in zip(stats["losses"], single["losses"]):
            self.assertAlmostEqual(a, b, places=4)
        self.assert_same_weights(out, os.path.join(self.dir, "single"))
        out = os.path.join(self.dir, "fsdp-killed")
        extra = {"WHALE_FSDP": "1", "WHALE_CHECKPOINT_STEPS": "2"}
        codes, log = self.run_ranks(out, 2, dict(extra, WHALE_TEST_EXIT_AFTER_STEP="3"))
        self.assertEqual(codes, [75, 75], log)
        codes, log = self.run_ranks(out, 2, extra)
        self.assertEqual(codes, [0, 0], log)
        self.assert_same_weights(out, os.path.join(self.dir, "single"))

    def test_fsdp_wiring(self):
        """shard() and ShardedState against a recording stand-in for the
        FSDP2 and state-dict APIs (the real ones need torch >= 2.4): every
        transformer block is sharded before the root, with bfloat16
        compute and float32 gradient reduction, and checkpoints go through
        torch.distributed.checkpoint."""
        calls = []

        class Block(torch.nn.Linear):
            pass

        class Model(torch.nn.Module):
            _no_split_modules = ["Block"]

            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([Block(2, 2), Block(2, 2)])
                self.head = torch.nn.Linear(2, 2)

        api = type("API", (), {})()
        api.init_device_mesh = lambda kind, shape: calls.append(("mesh", kind, shape)) or "mesh"
        api.MixedPrecisionPolicy = lambda **kw: ("mp", tuple(sorted(kw.items())))
        api.fully_shard = lambda m, mesh, mp_policy: calls.append(("shard", type(m).__name__, mesh, mp_policy))
        api.get_state_dict = lambda model, opt: ({"w": 1}, {"s": 2})
        api.dcp = type("DCP", (), {})()
        api.dcp.save = lambda sd, checkpoint_id: calls.append(("save", sd, checkpoint_id))
        api.dcp.load = lambda sd, checkpoint_id: calls.append(("load", sd, checkpoint_id)) or sd["model"].update(w=5)
        api.set_state_dict = lambda model, opt, model_state_dict, optim_state_dict: \
            calls.append(("set", model_state_dict, optim_state_dict))
        m = Model()
        train_sft.shard(m, api, torch.device("cuda", 3), 8, torch.bfloat16)
        mp = ("mp", (("param_dtype", torch.bfloat16), ("reduce_dtype", torch.float32)))
        self.assertEqual(calls, [("mesh", "cuda", (8,)), ("shard", "Block", "mesh", mp), ("shard", "Block", "mesh", mp),
                                 ("shard", "Model", "mesh", mp)])
        calls.clear()
        st = train_sft.ShardedState(api)
        st.save("/ck", m, None, 0)
        st.load("/ck", m, None, 0)
        self.assertEqual(calls, [("save", {"model": {"w": 1}, "optimizer": {"s": 2}}, "/ck"),
                                 ("load", {"model": {"w": 5}, "optimizer": {"s": 2}}, "/ck"),
                                 ("set", {"w": 5}, {"s": 2})])
        # On one process FSDP is refused before anything loads.
        os.environ.update(WHALE_FSDP="1", WHALE_OUTPUT_DIR=os.path.join(self.dir, "one"))
        with self.assertRaisesRegex(SystemExit, "WHALE_FSDP=1 shards over several ranks"):
            train_sft.main([])

    def test_bad_settings_are_refused(self):
        for env, want in (({"WHALE_FSDP": "1", "WHALE_LORA": "1"}, "LoRA trains few parameters: use DDP"),
                          ({"WHALE_MICRO_BATCH_SIZE": "0"}, "--micro-batch-size must be at least 1")):
            with self.subTest(env=env):
                old = dict(os.environ)
                os.environ.update(env, WHALE_OUTPUT_DIR=self.dir)
                with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
                    train_sft.parse_args([])
                self.assertIn(want, err.getvalue())
                os.environ.clear()
                os.environ.update(old)

    def test_saved_dtype(self):
        # The FSDP path casts the gathered float32 state dict for saving:
        # tied weights stay one tensor, and config.json names the dtype.
        w = torch.randn(4, 3)
        sd = train_sft.cast_state({"embed": w, "lm_head": w, "steps": torch.tensor([3])}, torch.bfloat16)
        self.assertEqual(sd["embed"].dtype, torch.bfloat16)
        self.assertIs(sd["embed"], sd["lm_head"])
        self.assertEqual(sd["steps"].dtype, torch.int64)
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump({"torch_dtype": "float32", "dtype": "float32", "hidden_size": 8}, f)
        train_sft.set_saved_dtype(self.dir, "bfloat16")
        with open(os.path.join(self.dir, "config.json")) as f:
            self.assertEqual(json.load(f), {"torch_dtype": "bfloat16", "dtype": "bfloat16", "hidden_size": 8})
        # On a CPU there is no bfloat16 compute.
        self.assertIsNone(train_sft.compute_dtype(torch, torch.device("cpu"), True))

    def test_required_env(self):
        os.environ.pop("WHALE_BASE_CHECKPOINT")
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            train_sft.parse_args([])
        self.assertIn("--base (or its WHALE_* variable) is required", err.getvalue())


if __name__ == "__main__":
    unittest.main()
