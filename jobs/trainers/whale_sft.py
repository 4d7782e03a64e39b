"""Data loading, loss masking and the SFT loop of whale's reference trainer.

This module needs only the standard library for reading and masking, and
PyTorch for the loss and the training loop; it never imports transformers,
so that its tests run with a toy model and a toy tokenizer.

Contract (WHALE's online RSFT, one weight step):
  * An example is a chat ({"messages": [...], "train_mask": [...]}) as the
    finetune stage exports it to $WHALE_SFT_JSONL; train_mask has one entry
    per message, true where the model wrote the message.
  * Only tokens of messages with train_mask true carry loss: the role header
    the chat template puts before an assistant turn, and every system, user
    and tool token, are masked (label -100).
  * The loss is token-normalised NLL: the sum of the per-token negative log
    likelihoods of one optimizer step divided by the number of trained
    tokens in that step (across micro-batches and ranks), not a mean of
    per-example means.
"""

import json
import math
import os
import random

IGNORE = -100


class DataError(ValueError):
    """A malformed example; the message names the file and line or row."""


# ---------------------------------------------------------------- reading

def iter_jsonl(path):
    """Yields the examples of a JSONL export, checking each one."""
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not JSON: {e}") from None
            yield check_example(ex, f"{path}:{lineno}")


def iter_parquet(directory):
    """Yields the examples of the SFT Parquet files in directory (pyarrow)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            "reading Parquet needs pyarrow; install it or set WHALE_SFT_JSONL "
            "(the finetune stage always writes it)") from None
    names = sorted(n for n in os.listdir(directory) if n.endswith(".parquet"))
    for name in names:
        path = os.path.join(directory, name)
        pf = pq.ParquetFile(path)
        row = 0
        for batch in pf.iter_batches(columns=["example_id", "episode_id", "task_id", "messages", "train_mask"]):
            for ex in batch.to_pylist():
                yield check_example(ex, f"{path} row {row}")
                row += 1


def load_examples(env=os.environ):
    """Reads the examples from $WHALE_SFT_JSONL, else $WHALE_SFT_PARQUET."""
    if env.get("WHALE_SFT_JSONL"):
        return list(iter_jsonl(env["WHALE_SFT_JSONL"]))
    if env.get("WHALE_SFT_PARQUET"):
        return list(iter_parquet(env["WHALE_SFT_PARQUET"]))
    raise DataError("neither WHALE_SFT_JSONL nor WHALE_SFT_PARQUET is set")


def check_example(ex, where):
    """Validates one example and normalises its messages for chat templates."""
    if not isinstance(ex, dict):
        raise DataError(f"{where}: an example is a JSON object")
    msgs, mask = ex.get("messages"), ex.get("train_mask")
    if not isinstance(msgs, list) or not isinstance(mask, list):
        raise DataError(f"{where}: want lists 'messages' and 'train_mask'")
    if len(msgs) != len(mask):
        raise DataError(f"{where}: train_mask has {len(mask)} entries for {len(msgs)} messages")
    out = []
    for i, (m, t) in enumerate(zip(msgs, mask)):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise DataError(f"{where}: message {i} has no role")
        if t and m["role"] != "assistant":
            raise DataError(f"{where}: message {i}: train_mask is true on a {m['role']!r} message")
        msg = {"role": m["role"], "content": m.get("content") or ""}
        for k in ("name", "tool_call_id"):
            if m.get(k):
                msg[k] = m[k]
        calls = m.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = [_tool_call(c) for c in calls]
        out.append(msg)
    return {"messages": out, "train_mask": [bool(t) for t in mask],
            "example_id": ex.get("example_id", "")}


def _tool_call(c):
    # Parquet rows carry {id, name, arguments}; the JSONL export nests them
    # OpenAI-style under "function". Templates want the latter.
    if "function" in c:
        return {"id": c.get("id", ""), "type": "function", "function": dict(c["function"])}
    return {"id": c.get("id", ""), "type": "function",
            "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}


# ---------------------------------------------------------------- masking

def render(tokenizer, messages, add_generation_prompt=False):
    if not messages:
        return ""
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def segments(example, tokenizer):
    """Splits the rendered chat into (text, trained) pieces.

    The chat is rendered one message longer at a time; each message's
    piece is what its render adds to the previous one. For a trained
    assistant message the piece is split again: the generation prompt (the
    role header the model did not write) is untrained, the rest (content,
    tool calls and end-of-turn) is trained. A template that rewrites
    earlier turns (e.g. dropping old reasoning) is not prefix-consistent;
    that is an error, since the model never saw such a context.
    """
    msgs, mask = example["messages"], example["train_mask"]
    out, prev = [], ""
    for i in range(len(msgs)):
        full = render(tokenizer, msgs[: i + 1])
        if not full.startswith(prev):
            raise DataError(
                f"example {example.get('example_id', '')!r}: the chat template is not prefix-consistent "
                f"at message {i}: rendering more messages changed earlier text; set WHALE_CHAT_TEMPLATE "
                f"to a template that renders history verbatim")
        piece = full[len(prev):]
        if mask[i]:
            head = render(tokenizer, msgs[:i], add_generation_prompt=True)[len(prev):] if i else \
                _generation_header(tokenizer, msgs[0])
            n = _common_prefix(head, piece)
            if n:
                out.append((piece[:n], False))
            out.append((piece[n:], True))
        else:
            out.append((piece, False))
        prev = full
    return out


def _generation_header(tokenizer, first):
    # With no earlier message there is no generation prompt to render; the
    # header is what the template puts before an empty assistant turn.
    probe = render(tokenizer, [dict(first, content="")])
    return probe


def _common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def encode(tokenizer, text):
    if hasattr(tokenizer, "encode"):
        try:
            return list(tokenizer.encode(text, add_special_tokens=False))
        except TypeError:
            return list(tokenizer.encode(text))
    raise TypeError("tokenizer has no encode()")


def features(example, tokenizer, max_length=None):
    """Token ids and labels of one example; labels are IGNORE where masked.

    Each piece is tokenised on its own so that no token straddles a trained
    and an untrained piece. Longer examples are cut at max_length; one
    with no trained token left gives None.
    """
    ids, labels = [], []
    for text, trained in segments(example, tokenizer):
        toks = encode(tokenizer, text)
        ids.extend(toks)
        labels.extend(toks if trained else [IGNORE] * len(toks))
    if max_length and len(ids) > max_length:
        ids, labels = ids[:max_length], labels[:max_length]
    # The first token has no context to be predicted from.
    if all(l == IGNORE for l in labels[1:]):
        return None
    return {"input_ids": ids, "labels": labels}


def trained_tokens(feat):
    return sum(1 for l in feat["labels"][1:] if l != IGNORE)


# ---------------------------------------------------------------- loss

def collate(batch, pad_id):
    import torch
    n = max(len(f["input_ids"]) for f in batch)
    ids = torch.full((len(batch), n), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), n), IGNORE, dtype=torch.long)
    attn = torch.zeros((len(batch), n), dtype=torch.long)
    for i, f in enumerate(batch):
        k = len(f["input_ids"])
        ids[i, :k] = torch.tensor(f["input_ids"], dtype=torch.long)
        labels[i, :k] = torch.tensor(f["labels"], dtype=torch.long)
        attn[i, :k] = 1
    return ids, labels, attn


def masked_nll_sum(logits, labels):
    """Sum of the NLL of every trained token, and how many there are.

    logits[:, t] predicts labels[:, t+1]; positions labelled IGNORE add
    nothing, and neither do their gradients.
    """
    import torch.nn.functional as F
    pred = logits[:, :-1, :].float()
    gold = labels[:, 1:]
    total = F.cross_entropy(pred.reshape(-1, pred.size(-1)), gold.reshape(-1),
                            ignore_index=IGNORE, reduction="sum")
    return total, int((gold != IGNORE).sum())


def _logits(out):
    return getattr(out, "logits", out)


def batches(feats, batch_size, seed):
    order = list(range(len(feats)))
    random.Random(seed).shuffle(order)
    for i in range(0, len(order), batch_size):
        yield [feats[j] for j in order[i: i + batch_size]]


def train_epoch(model, optimizer, feats, *, batch_size, micro_batch_size, pad_id, device,
                seed=0, max_grad_norm=1.0, rank=0, world=1, log=print, all_reduce=None):
    """One epoch over feats; returns per-step losses (token-normalised).

    Every optimizer step takes batch_size examples (split across world
    ranks and micro-batches); its loss is the summed token NLL divided by
    the trained tokens of the whole step. With world > 1 the caller passes
    all_reduce(int) -> int summing over ranks, and gradients are averaged
    by DDP, so each rank scales its loss by world.
    """
    import torch
    losses = []
    steps = math.ceil(len(feats) / batch_size)
    model.train()
    for step, batch in enumerate(batches(feats, batch_size, seed), 1):
        mine = batch[rank::world]
        if not mine:
            # Every rank must run a backward for DDP; an all-masked copy
            # adds no loss and no gradient.
            mine = [{"input_ids": batch[0]["input_ids"], "labels": [IGNORE] * len(batch[0]["labels"])}]
        tokens = sum(trained_tokens(f) for f in mine)
        total = all_reduce(tokens) if all_reduce else tokens
        if total == 0:
            continue
        optimizer.zero_grad(set_to_none=True)
        step_sum = 0.0
        for i in range(0, len(mine), micro_batch_size):
            ids, labels, attn = collate(mine[i: i + micro_batch_size], pad_id)
            ids, labels, attn = ids.to(device), labels.to(device), attn.to(device)
            s, _ = masked_nll_sum(_logits(model(input_ids=ids, attention_mask=attn)), labels)
            (s * world / total).backward()
            step_sum += float(s.detach())
        if max_grad_norm and max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
        optimizer.step()
        loss = step_sum / tokens if tokens else 0.0
        losses.append(loss)
        if rank == 0:
            log(f"step {step}/{steps} loss {loss:.4f} tokens {total}")
    return losses


def evaluate_loss(model, feats, pad_id, device, micro_batch_size=1):
    """Token-normalised NLL of feats under model, without training."""
    import torch
    s_all, n_all = 0.0, 0
    was = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(feats), micro_batch_size):
            ids, labels, attn = collate(feats[i: i + micro_batch_size], pad_id)
            s, n = masked_nll_sum(_logits(model(input_ids=ids.to(device), attention_mask=attn.to(device))),
                                  labels.to(device))
            s_all += float(s)
            n_all += n
    model.train(was)
    return s_all / n_all if n_all else float("nan")
