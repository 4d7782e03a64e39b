"""train_sft.py with the toy model in place of transformers: the finetune
stage's end-to-end test runs it as its trainer command."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import fake_transformers  # noqa: E402

sys.modules["transformers"] = fake_transformers

import train_sft  # noqa: E402
import whale_sft  # noqa: E402
from toy import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

if __name__ == "__main__":
    base = os.environ["WHALE_BASE_CHECKPOINT"]
    tok = AutoTokenizer.from_pretrained(base)
    if os.environ.get("WHALE_CHAT_TEMPLATE"):
        with open(os.environ["WHALE_CHAT_TEMPLATE"]) as f:
            tok.chat_template = f.read()
    feats = [f for f in (whale_sft.features(e, tok) for e in whale_sft.load_examples()) if f]
    if os.environ.get("TOY_DUMP_TRAINED"):
        # What carries loss, and the whole rendering, per example: the
        # end-to-end test reads them back from the checkpoint.
        with open(os.path.join(os.environ["WHALE_OUTPUT_DIR"], "trained.jsonl"), "w") as f:
            for feat in feats:
                trained = tok.decode([t for t, l in zip(feat["input_ids"], feat["labels"]) if l != whale_sft.IGNORE])
                json.dump({"text": tok.decode(feat["input_ids"]), "trained": trained}, f)
                f.write("\n")
    before = whale_sft.evaluate_loss(AutoModelForCausalLM.from_pretrained(base), feats, 0, "cpu")
    base_loaded = AutoModelForCausalLM.loaded_from is not None
    train_sft.main()
    out = os.environ["WHALE_OUTPUT_DIR"]
    after = whale_sft.evaluate_loss(AutoModelForCausalLM.from_pretrained(out), feats, 0, "cpu")
    with open(os.path.join(out, "toy_eval.json"), "w") as f:
        json.dump({"loss_before": before, "loss_after": after,
                   "base_loaded": base_loaded}, f)
    print(f"toy eval: loss {before:.4f} -> {after:.4f}", flush=True)
