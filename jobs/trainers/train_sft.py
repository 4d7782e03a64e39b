#!/usr/bin/env python3
"""whale's reference trainer: one RSFT update of a Hugging Face causal LM.

Run by the finetune stage's command backend, which sets the WHALE_*
environment (see README.md next to this file):

    python3 jobs/trainers/train_sft.py                  # one process
    torchrun --nproc-per-node 8 jobs/trainers/train_sft.py
    srun --gpus=8 torchrun --nproc-per-node 8 jobs/trainers/train_sft.py

It reads the accepted examples ($WHALE_SFT_JSONL, or $WHALE_SFT_PARQUET with
pyarrow), renders them with the model's chat template (an assistant
message's reasoning as its reasoning_content), trains on the tokens of
assistant messages whose train_mask is true, their reasoning too unless
$WHALE_TRAIN_REASONING=0 (token-normalised NLL, AdamW
at $WHALE_LEARNING_RATE for $WHALE_EPOCHS epochs), full fine-tuning or LoRA
($WHALE_LORA=1, through peft), and saves with save_pretrained to
$WHALE_OUTPUT_DIR: the full model and tokenizer, or the LoRA adapter (what
vLLM's /v1/load_lora_adapter loads) and tokenizer.

Needs torch, transformers, and peft for LoRA.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import whale_sft  # noqa: E402


def env(name, default=None):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def flag(name, default=False):
    v = env(name)
    if v is None:
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default=env("WHALE_BASE_CHECKPOINT"), help="$WHALE_BASE_CHECKPOINT")
    p.add_argument("--base-model", default=env("WHALE_BASE_MODEL"), help="$WHALE_BASE_MODEL: what a LoRA base adapter applies to")
    p.add_argument("--output", default=env("WHALE_OUTPUT_DIR"), help="$WHALE_OUTPUT_DIR")
    p.add_argument("--lr", type=float, default=float(env("WHALE_LEARNING_RATE", "1e-6")))
    p.add_argument("--epochs", type=int, default=int(env("WHALE_EPOCHS", "1")))
    p.add_argument("--seed", type=int, default=int(env("WHALE_SEED", "0")))
    p.add_argument("--lora", action=argparse.BooleanOptionalAction, default=flag("WHALE_LORA"))
    p.add_argument("--lora-rank", type=int, default=int(env("WHALE_LORA_RANK", "16")))
    p.add_argument("--lora-alpha", type=int, default=int(env("WHALE_LORA_ALPHA", "32")))
    p.add_argument("--lora-dropout", type=float, default=float(env("WHALE_LORA_DROPOUT", "0.0")))
    p.add_argument("--lora-targets", default=env("WHALE_LORA_TARGETS", "all-linear"),
                   help="comma-separated module names, or all-linear")
    p.add_argument("--batch-size", type=int, default=int(env("WHALE_BATCH_SIZE", "32")),
                   help="examples per optimizer step, across all ranks")
    p.add_argument("--micro-batch-size", type=int, default=int(env("WHALE_MICRO_BATCH_SIZE", "1")),
                   help="examples per forward pass on one rank")
    p.add_argument("--max-length", type=int, default=int(env("WHALE_MAX_LENGTH", "16384")))
    p.add_argument("--max-grad-norm", type=float, default=float(env("WHALE_MAX_GRAD_NORM", "1.0")))
    p.add_argument("--weight-decay", type=float, default=float(env("WHALE_WEIGHT_DECAY", "0.0")))
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=flag("WHALE_BF16", True),
                   help="load the weights in bfloat16 when a GPU is present")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction,
                   default=flag("WHALE_GRADIENT_CHECKPOINTING"))
    p.add_argument("--chat-template", default=env("WHALE_CHAT_TEMPLATE"),
                   help="a Jinja file replacing the tokenizer's chat template")
    p.add_argument("--train-reasoning", action=argparse.BooleanOptionalAction,
                   default=flag("WHALE_TRAIN_REASONING", True),
                   help="$WHALE_TRAIN_REASONING: the reasoning of trained assistant turns carries loss "
                        "(else it stays in the context, masked)")
    a = p.parse_args(argv)
    for name in ("base", "output"):
        if not getattr(a, name):
            p.error(f"--{name} (or its WHALE_* variable) is required")
    return a


def log(msg):
    print(msg, flush=True)


def main(argv=None):
    a = parse_args(argv)
    import torch
    import transformers

    world = int(env("WORLD_SIZE", "1"))
    rank = int(env("RANK", "0"))
    local = int(env("LOCAL_RANK", "0"))
    dist = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    torch.manual_seed(a.seed)

    adapter_base = os.path.isfile(os.path.join(a.base, "adapter_config.json"))
    if adapter_base and not a.lora:
        raise SystemExit(f"{a.base} holds a LoRA adapter: keep WHALE_LORA=1 for the whole run")
    base_weights = a.base
    if adapter_base:
        with open(os.path.join(a.base, "adapter_config.json")) as f:
            base_weights = a.base_model or json.load(f).get("base_model_name_or_path")
        if not base_weights:
            raise SystemExit("the base adapter does not say which model it applies to; set WHALE_BASE_MODEL")

    tok_src = a.base if os.path.isfile(os.path.join(a.base, "tokenizer_config.json")) or not adapter_base else base_weights
    tokenizer = transformers.AutoTokenizer.from_pretrained(tok_src)
    if a.chat_template:
        with open(a.chat_template) as f:
            tokenizer.chat_template = f.read()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token

    t0 = time.time()
    examples = whale_sft.load_examples()
    feats, dropped = [], 0
    for ex in examples:
        f = whale_sft.features(ex, tokenizer, a.max_length, train_reasoning=a.train_reasoning)
        if f is None:
            dropped += 1
        else:
            feats.append(f)
    tokens = sum(whale_sft.trained_tokens(f) for f in feats)
    with_tools = sum(1 for ex in examples if ex.get("tools"))
    if rank == 0:
        log(f"{len(examples)} examples ({with_tools} with native tools), "
            f"{len(feats)} with trained tokens ({dropped} dropped), "
            f"{tokens} trained tokens (reasoning {'trained' if a.train_reasoning else 'masked'}); "
            f"tokenized in {time.time() - t0:.1f}s")
    if not feats:
        raise SystemExit("no example has a trained token left (raise WHALE_MAX_LENGTH?)")

    dtype = torch.bfloat16 if a.bf16 and device.type == "cuda" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(base_weights, torch_dtype=dtype)
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if a.lora:
        import peft
        if adapter_base:
            model = peft.PeftModel.from_pretrained(model, a.base, is_trainable=True)
        else:
            targets = a.lora_targets if a.lora_targets == "all-linear" else a.lora_targets.split(",")
            cfg = peft.LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
                                  target_modules=targets, task_type="CAUSAL_LM")
            model = peft.get_peft_model(model, cfg)
        if a.gradient_checkpointing:
            model.enable_input_require_grads()
    model.to(device)
    train_model = model
    all_reduce = None
    if dist is not None:
        train_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if device.type == "cuda" else None)

        def all_reduce(n):
            t = torch.tensor([n], device=device)
            dist.all_reduce(t)
            return int(t.item())

    params = [p for p in model.parameters() if p.requires_grad]
    if rank == 0:
        log(f"training {sum(p.numel() for p in params):,} parameters ({'LoRA' if a.lora else 'full'}) "
            f"on {world} rank(s), lr {a.lr:g}, {a.epochs} epoch(s), batch {a.batch_size}")
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
    losses = []
    t1 = time.time()
    for epoch in range(a.epochs):
        losses += whale_sft.train_epoch(
            train_model, opt, feats, batch_size=a.batch_size, micro_batch_size=a.micro_batch_size,
            pad_id=tokenizer.pad_token_id, device=device, seed=a.seed + epoch,
            max_grad_norm=a.max_grad_norm, rank=rank, world=world, log=log, all_reduce=all_reduce)

    if rank == 0:
        os.makedirs(a.output, exist_ok=True)
        model.save_pretrained(a.output, safe_serialization=True)
        tokenizer.save_pretrained(a.output)
        stats = {"examples": len(examples), "trained_examples": len(feats), "trained_tokens": tokens,
                 "steps": len(losses), "losses": losses, "seconds": time.time() - t1, "lora": a.lora,
                 "world_size": world, "train_reasoning": a.train_reasoning, "examples_with_tools": with_tools}
        with open(os.path.join(a.output, "whale_train_stats.json"), "w") as f:
            json.dump(stats, f, indent=2)
        log(f"saved to {a.output} after {len(losses)} steps in {stats['seconds']:.0f}s")
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
