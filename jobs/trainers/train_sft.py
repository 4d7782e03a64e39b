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

Full fine-tuning runs on one process, under DDP (torchrun, every rank holds
the whole model), or sharded with FSDP2 ($WHALE_FSDP=1, torch >= 2.4). The
effective batch is $WHALE_BATCH_SIZE examples per optimizer step across all
ranks, reached by gradient accumulation over micro-batches. With
$WHALE_BF16 the forwards run in bfloat16 where the GPU supports it, over
float32 weights. Every $WHALE_CHECKPOINT_STEPS steps or
$WHALE_CHECKPOINT_MINUTES minutes it checkpoints itself to
$WHALE_RESUME_DIR (default $WHALE_OUTPUT_DIR/whale_resume), and a rerun on
the same inputs resumes from there.

Needs torch, transformers, and peft for LoRA.
"""

import argparse
import json
import os
import sys
import time
import types

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
                   help="$WHALE_BF16: compute in bfloat16 on a GPU that supports it (autocast, or FSDP's mixed "
                        "precision) over float32 weights, and save the checkpoint in bfloat16; LoRA loads the "
                        "frozen base in bfloat16")
    p.add_argument("--fsdp", action=argparse.BooleanOptionalAction, default=flag("WHALE_FSDP"),
                   help="$WHALE_FSDP: shard weights, gradients and optimizer state over the ranks with FSDP2 "
                        "(full fine-tuning; torch >= 2.4)")
    p.add_argument("--resume-dir", default=env("WHALE_RESUME_DIR"),
                   help="$WHALE_RESUME_DIR: where the trainer checkpoints itself and resumes from "
                        "(default: $WHALE_OUTPUT_DIR/whale_resume; removed once the model is saved)")
    p.add_argument("--checkpoint-steps", type=int, default=int(env("WHALE_CHECKPOINT_STEPS", "0")),
                   help="$WHALE_CHECKPOINT_STEPS: checkpoint every this many optimizer steps (0: by time only)")
    p.add_argument("--checkpoint-minutes", type=float, default=float(env("WHALE_CHECKPOINT_MINUTES", "30")),
                   help="$WHALE_CHECKPOINT_MINUTES: checkpoint after a step once this long has passed since "
                        "the last one (0: by steps only)")
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
    for name in ("batch_size", "micro_batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.fsdp and a.lora:
        p.error("--fsdp (WHALE_FSDP=1) is for full fine-tuning; LoRA trains few parameters: use DDP")
    if not a.resume_dir:
        a.resume_dir = os.path.join(a.output, "whale_resume")
    return a


def log(msg):
    print(msg, flush=True)


class FSDPUnavailable(RuntimeError):
    pass


def fsdp_api():
    """FSDP2 and the distributed state-dict and checkpoint APIs, imported
    only when WHALE_FSDP=1: torch 1.13 cannot even import
    torch.distributed.fsdp (a dataclass error), and the other paths must
    run there."""
    import torch
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_state_dict, set_state_dict)
        from torch.distributed.device_mesh import init_device_mesh
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
        except ImportError:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # 2.4, 2.5
    except Exception as e:  # ImportError, or 1.13's ValueError
        raise FSDPUnavailable(f"WHALE_FSDP=1 needs torch >= 2.4 (FSDP2's fully_shard and "
                              f"torch.distributed.checkpoint.state_dict); this is torch {torch.__version__}: "
                              f"{type(e).__name__}: {e}") from None
    return types.SimpleNamespace(dcp=dcp, StateDictOptions=StateDictOptions, get_model_state_dict=get_model_state_dict,
                                 get_state_dict=get_state_dict, set_state_dict=set_state_dict,
                                 init_device_mesh=init_device_mesh, MixedPrecisionPolicy=MixedPrecisionPolicy,
                                 fully_shard=fully_shard)


def shard(model, api, device, world, compute_dtype):
    """Applies FSDP2 to every transformer block (the classes a Hugging Face
    model lists in _no_split_modules), then to the whole model, so that one
    block's weights are gathered at a time. The sharded weights stay
    float32 for AdamW; with bf16 they are gathered and used in bfloat16 and
    gradients are reduced in float32."""
    import torch
    mesh = api.init_device_mesh(device.type, (world,))
    mp = api.MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32) if compute_dtype \
        else api.MixedPrecisionPolicy()
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in blocks:
            api.fully_shard(m, mesh=mesh, mp_policy=mp)
    api.fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


class ShardedState:
    """Model and optimizer state of an FSDP run, saved by every rank with
    torch.distributed.checkpoint (each its shards; a rerun on another
    number of ranks reshards on load)."""

    def __init__(self, api):
        self.api = api

    def save(self, path, model, optimizer, rank):
        msd, osd = self.api.get_state_dict(model, optimizer)
        self.api.dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=path)

    def load(self, path, model, optimizer, rank):
        msd, osd = self.api.get_state_dict(model, optimizer)
        sd = {"model": msd, "optimizer": osd}
        self.api.dcp.load(sd, checkpoint_id=path)
        self.api.set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optimizer"])


def compute_dtype(torch, device, want_bf16):
    """bfloat16 where the device supports it, else None (float32)."""
    if want_bf16 and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def cast_state(sd, dtype):
    """sd with its floating tensors in dtype; tensors that share storage
    (tied embeddings) stay shared."""
    memo, out = {}, {}
    for k, v in sd.items():
        if v.is_floating_point() and v.dtype != dtype:
            key = (v.data_ptr(), tuple(v.shape), tuple(v.stride()))
            if key not in memo:
                memo[key] = v.to(dtype)
            v = memo[key]
        out[k] = v
    return out


def set_saved_dtype(out, name):
    """Makes config.json name the dtype the weights were saved in (the
    weights of an FSDP run are written from a float32 state dict cast to
    it, which save_pretrained does not see)."""
    path = os.path.join(out, "config.json")
    if not os.path.isfile(path):
        return
    with open(path) as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = name
    if "dtype" in cfg:
        cfg["dtype"] = name
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def main(argv=None):
    a = parse_args(argv)
    import torch
    import transformers

    world = int(env("WORLD_SIZE", "1"))
    if a.fsdp and world < 2:
        raise SystemExit("WHALE_FSDP=1 shards over several ranks: start it with torchrun --nproc-per-node N "
                         "(N > 1); on one GPU leave it off")
    api = fsdp_api() if a.fsdp else None
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

    # Full fine-tuning keeps float32 weights: AdamW's updates at the
    # paper's learning rates (1e-7..1e-6) are far below a bfloat16
    # weight's resolution (0.4-0.8% of its value) and would be lost. A LoRA
    # base is frozen, so it is loaded in the compute dtype.
    cdtype = compute_dtype(torch, device, a.bf16)
    load_dtype = cdtype if a.lora and cdtype is not None else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(base_weights, torch_dtype=load_dtype)
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
    train_model = model
    all_reduce = barrier = None
    if dist is not None:
        def all_reduce(x):
            t = torch.tensor([float(x)], dtype=torch.float64, device=device)
            dist.all_reduce(t)
            return float(t.item())

        barrier = dist.barrier
    if a.fsdp:
        train_model = model = shard(model, api, device, world, cdtype)
    else:
        model.to(device)
        if dist is not None:
            train_model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[local] if device.type == "cuda" else None)

    params = [p for p in model.parameters() if p.requires_grad]
    accum = -(-a.batch_size // (world * a.micro_batch_size))
    steps_total = -(-len(feats) // a.batch_size) * a.epochs
    if rank == 0:
        log(f"training {sum(p.numel() for p in params):,} parameters ({'LoRA' if a.lora else 'full'}"
            f"{', FSDP' if a.fsdp else ', DDP' if dist is not None else ''}) on {world} rank(s), "
            f"{'bfloat16' if cdtype else 'float32'} compute, lr {a.lr:g}, {a.epochs} epoch(s), "
            f"{steps_total} steps of {a.batch_size} examples = {world} rank(s) x {a.micro_batch_size} "
            f"x {accum} accumulated micro-batches")
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)

    settings = {"base": whale_sft.base_identity(a.base), "base_model": a.base_model if adapter_base else None,
                "lr": a.lr,
                "epochs": a.epochs, "seed": a.seed, "batch_size": a.batch_size, "lora": a.lora,
                "lora_rank": a.lora_rank, "lora_alpha": a.lora_alpha, "lora_dropout": a.lora_dropout,
                "lora_targets": a.lora_targets, "weight_decay": a.weight_decay, "max_grad_norm": a.max_grad_norm,
                "compute_dtype": str(cdtype), "fsdp": a.fsdp}
    resume = whale_sft.Resume(a.resume_dir, whale_sft.fingerprint(feats, settings), rank=rank, world=world,
                              barrier=barrier, log=log, state=ShardedState(api) if a.fsdp else None)
    start, losses = resume.load(model, opt)
    exit_after = int(env("WHALE_TEST_EXIT_AFTER_STEP", "0"))
    last = [time.time()]

    def after_step(step, losses):
        due = bool(a.checkpoint_steps and step % a.checkpoint_steps == 0) or \
            bool(a.checkpoint_minutes and time.time() - last[0] >= a.checkpoint_minutes * 60)
        if all_reduce and a.checkpoint_minutes:
            due = all_reduce(due) > 0  # the ranks' clocks differ; all must save together
        if due and step < steps_total:
            t = time.time()
            resume.save(step, model, opt, losses)
            last[0] = time.time()
            if rank == 0:
                log(f"checkpoint after step {step} in {last[0] - t:.1f}s to {resume.dir}")
        if exit_after and step == exit_after:
            # Tests: dies as a killed job would, without any cleanup.
            log(f"WHALE_TEST_EXIT_AFTER_STEP: exiting after step {step}")
            os._exit(75)

    t1 = time.time()
    losses = whale_sft.train(
        train_model, opt, feats, batch_size=a.batch_size, micro_batch_size=a.micro_batch_size,
        pad_id=tokenizer.pad_token_id, device=device, epochs=a.epochs, seed=a.seed,
        max_grad_norm=a.max_grad_norm, rank=rank, world=world, log=log, all_reduce=all_reduce,
        autocast_dtype=None if a.fsdp else cdtype, start_step=start, losses=losses, after_step=after_step)

    full_sd = None
    if a.fsdp:
        # A collective: every rank sends its shards, rank 0 gets the whole
        # state dict on the CPU.
        full_sd = api.get_model_state_dict(model, options=api.StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        os.makedirs(a.output, exist_ok=True)
        if a.fsdp:
            model.save_pretrained(a.output, state_dict=cast_state(full_sd, cdtype) if cdtype else full_sd,
                                  safe_serialization=True)
            if cdtype:
                set_saved_dtype(a.output, "bfloat16")
        else:
            if cdtype and not a.lora:
                model.to(cdtype)  # training is over: save what vLLM serves
            model.save_pretrained(a.output, safe_serialization=True)
        tokenizer.save_pretrained(a.output)
        stats = {"examples": len(examples), "trained_examples": len(feats), "trained_tokens": tokens,
                 "steps": len(losses), "losses": losses, "seconds": time.time() - t1, "lora": a.lora,
                 "world_size": world, "train_reasoning": a.train_reasoning, "examples_with_tools": with_tools,
                 "fsdp": a.fsdp, "compute_dtype": "bfloat16" if cdtype else "float32",
                 "batch_size": a.batch_size, "micro_batch_size": a.micro_batch_size,
                 "accumulation": accum, "resumed_after_step": start}
        with open(os.path.join(a.output, "whale_train_stats.json"), "w") as f:
            json.dump(stats, f, indent=2)
        log(f"saved to {a.output} after {len(losses)} steps in {stats['seconds']:.0f}s")
    if dist is not None:
        dist.barrier()
    resume.clear()
    if dist is not None:
        # DDP's reducer must go before its process group: released after
        # it (when main returns), it hung one rank in about 1 of 10 runs
        # with torch 1.13's gloo.
        del train_model
        import gc
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
