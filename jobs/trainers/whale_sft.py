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
  * An example may carry "tools": the OpenAI tools array the model was
    offered (what vLLM got as tools=). It goes to every render of the chat
    template as tools=, which Qwen3-style templates show in the system
    turn; those tokens are context, masked like the rest of it. Without
    tools nothing is passed, as before.
  * An assistant message may carry "reasoning" (what vLLM returned as
    reasoning_content); it goes to the chat template as reasoning_content,
    which Qwen3-style templates render as a <think> block. Its tokens carry
    loss unless train_reasoning is off (WHALE_TRAIN_REASONING=0): then they
    stay in the context and are masked. A template that renders nothing of
    it is refused, since training would drop what the model generated.
  * The loss is token-normalised NLL: the sum of the per-token negative log
    likelihoods of one optimizer step divided by the number of trained
    tokens in that step (across micro-batches and ranks), not a mean of
    per-example means.
  * The steps of a run (epochs of batches shuffled by seed + epoch) depend
    only on the examples and settings, so a run resumed from the trainer's
    own checkpoint (Resume) continues at the step count it saved and ends
    as an uninterrupted run would.
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
        for batch in pf.iter_batches(columns=parquet_columns(pf.schema_arrow.names)):
            for ex in batch.to_pylist():
                yield parquet_example(ex, f"{path} row {row}")
                row += 1


PARQUET_COLUMNS = ["example_id", "episode_id", "task_id", "messages", "train_mask"]


def parquet_columns(names):
    """The SFT table's columns to read, given those a file has: tools only
    where present (files written before it was added lack it)."""
    return PARQUET_COLUMNS + (["tools"] if "tools" in names else [])


def parquet_example(row, where):
    """Checks one row of the SFT table. Its tools column is the OpenAI tools
    array as JSON text, "" (or missing) when there were none."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row is a record")
    ex = dict(row)
    tools = ex.pop("tools", None)
    if tools is not None and not isinstance(tools, str):
        raise DataError(f"{where}{_example_name(ex)}: the tools column holds a {type(tools).__name__}, "
                        f"want JSON text")
    if tools and tools.strip():
        try:
            ex["tools"] = json.loads(tools)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}{_example_name(ex)}: tools is not JSON: {e}: {tools[:80]!r}") from None
    return check_example(ex, where)


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
        reasoning = m.get("reasoning")
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise DataError(f"{where}: message {i}: reasoning is a {type(reasoning).__name__}, want a string")
            if reasoning.strip():
                if m["role"] != "assistant":
                    raise DataError(f"{where}: message {i}: reasoning on a {m['role']!r} message")
                # The key chat templates read (Qwen3's among them).
                msg["reasoning_content"] = reasoning
        calls = m.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = [_tool_call(c) for c in calls]
        out.append(msg)
    example = {"messages": out, "train_mask": [bool(t) for t in mask],
               "example_id": ex.get("example_id", "")}
    tools = check_tools(ex.get("tools"), f"{where}{_example_name(ex)}")
    if tools:
        example["tools"] = tools
    ids = exact_tokens(msgs, example["train_mask"], f"{where}{_example_name(ex)}")
    if ids is not None:
        example["token_ids"] = ids
    return example


def _ids(v, what):
    if not isinstance(v, list) or not all(isinstance(t, int) and t >= 0 for t in v):
        raise DataError(f"{what}: want a list of token ids (integers >= 0)")
    return v


def exact_tokens(msgs, mask, where):
    """The example's exact tokens when the server returned them for every
    assistant message (token_ids, and prompt_token_ids: what the call's
    prompt added after the previous call's prompt and completion): a list
    of (ids, trained) pieces in order, or None to render the text. Messages
    after the last assistant message carry no loss and are left out."""
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return None
    pieces = []
    for i, m in enumerate(msgs[:last + 1]):
        if m.get("role") != "assistant":
            continue
        if not m.get("token_ids") or m.get("prompt_token_ids") is None:
            return None
        pieces.append((_ids(m["prompt_token_ids"], f"{where}: message {i}: prompt_token_ids"), False))
        pieces.append((_ids(m["token_ids"], f"{where}: message {i}: token_ids"), bool(mask[i])))
    return pieces


def check_tools(tools, where):
    """Validates an example's tools: the OpenAI tools array, a list of
    {"type": "function", "function": {"name", "description", "parameters"}}.
    None or an empty list is no tools (None is returned); else the list,
    as given, for the chat template."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise DataError(f"{where}: tools is a {type(tools).__name__}, want a list of "
                        f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}} (the OpenAI tools array)")
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise DataError(f"{where}: tools[{i}] is a {type(t).__name__}, want an object "
                            f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
            raise DataError(f"{where}: tools[{i}] has no function name: want "
                            f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {json.dumps(t)[:120]}")
    return tools or None


def _example_name(ex):
    eid = ex.get("example_id") if isinstance(ex, dict) else None
    return f" (example {eid!r})" if eid else ""


def _tool_call(c):
    # Parquet rows carry {id, name, arguments}; the JSONL export nests them
    # OpenAI-style under "function". Templates want the latter.
    if "function" in c:
        return {"id": c.get("id", ""), "type": "function", "function": dict(c["function"])}
    return {"id": c.get("id", ""), "type": "function",
            "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}


# ---------------------------------------------------------------- masking

def render(tokenizer, messages, add_generation_prompt=False, tools=None):
    """The chat template's text of messages; tools (the OpenAI tools array)
    go to it as tools=, and with none nothing is passed."""
    if not messages:
        return ""
    kw = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=add_generation_prompt, **kw)


def segments(example, tokenizer, train_reasoning=True):
    """Splits the rendered chat into (text, trained) pieces.

    The chat is rendered one message longer at a time; each message's
    piece is what its render adds to the previous one. For a trained
    assistant message the piece is split again: the generation prompt (the
    role header the model did not write) is untrained, the rest (reasoning,
    content, tool calls and end-of-turn) is trained. With train_reasoning
    off, the reasoning inside it (the span where the template renders the
    message's reasoning_content) is untrained as well. The example's tools,
    if any, go to every render, so that the template's listing of them (in
    the system turn) is part of the first, untrained, piece.

    A template that rewrites earlier turns (e.g. dropping old reasoning) is
    not prefix-consistent; that is an error, since the model never saw such
    a context. Only the untrained messages since the last assistant turn may
    be rewritten by a later non-assistant message (Qwen3 merges consecutive
    tool results into one user turn): no model output and no context a
    turn was generated from changes.
    """
    msgs, mask = example["messages"], example["train_mask"]
    tools = example.get("tools")
    out, prev = [], ""
    start, first = [], []  # per message: where its text starts, its first piece in out
    for i in range(len(msgs)):
        full = render(tokenizer, msgs[: i + 1], tools=tools)
        if not full.startswith(prev):
            changed = _common_prefix(prev, full)
            j = _untrained_tail(msgs, i)
            if j is None or changed < start[j]:
                k = max(k for k in range(i) if start[k] <= changed)
                raise DataError(_not_prefix_consistent(example, i, k))
            # Messages j..i render as one untrained piece.
            del out[first[j]:]
            out.append((full[start[j]:], False))
            start.append(start[j])
            first.append(first[j])
            prev = full
            continue
        piece = full[len(prev):]
        start.append(len(prev))
        first.append(len(out))
        span = None
        if msgs[i].get("reasoning_content"):
            span = _reasoning_span(tokenizer, example, i, prev, piece, locate=mask[i] and not train_reasoning)
        if mask[i]:
            head = render(tokenizer, msgs[:i], add_generation_prompt=True, tools=tools)[len(prev):] if i else \
                _generation_header(tokenizer, msgs[0], tools)
            n = _common_prefix(head, piece)
            if n:
                out.append((piece[:n], False))
            if span and not train_reasoning and span[1] > n:
                r0, r1 = max(span[0], n), span[1]
                out.extend(p for p in ((piece[n:r0], True), (piece[r0:r1], False), (piece[r1:], True)) if p[0])
            else:
                out.append((piece[n:], True))
        else:
            out.append((piece, False))
        prev = full
    return out


def _untrained_tail(msgs, i):
    """The first of the non-assistant messages just before message i, when
    message i is not an assistant's either; else None."""
    if msgs[i]["role"] == "assistant":
        return None
    j = i
    while j > 0 and msgs[j - 1]["role"] != "assistant":
        j -= 1
    return j if j < i else None


def _not_prefix_consistent(example, i, k):
    msgs = example["messages"]
    why = (f"example {example.get('example_id', '')!r}: the chat template is not prefix-consistent at message {i} "
           f"({msgs[i]['role']}): rendering it changed the text of message {k} ({msgs[k]['role']}), so "
           f"training on the whole conversation would not be what the model saw. ")
    if msgs[k]["role"] == "assistant" and msgs[k].get("reasoning_content"):
        why += ("Qwen3-style templates drop the <think> reasoning of assistant turns before the last user "
                "message, and keep it inside a tool-call chain (assistant, tool, assistant after the last "
                "user message): episodes whose observations come back as tool messages (native tools) are "
                "consistent. ")
        if msgs[i]["role"] == "user":
            why += ("Here an observation (or a new query) comes back as a user message, as with tag-based "
                    "tools: at rollout time the template had already stripped the earlier reasoning from "
                    "the model's context. ")
    elif msgs[k]["role"] == "assistant":
        why += ("(Qwen3's template also renders an empty <think> block on the last assistant message when "
                "it has no reasoning, and drops it once another message follows.) ")
    return why + ("Use native tools (observations as tool messages), or set WHALE_CHAT_TEMPLATE to a "
                  "template that renders history verbatim (and serve the same one to vLLM, so that the "
                  "rollout rendered it too).")


# Stands in for the reasoning when finding where a template renders it.
REASONING_PROBE = "WHALE-REASONING-PROBE-5f0c"


def _reasoning_span(tokenizer, example, i, prev, piece, locate):
    """Where message i's reasoning lies in its rendered piece: (start, end).

    Renders the message again with a probe for its reasoning_content: the
    text before and after the probe must be the piece's start and end, and
    what lies between is the reasoning as the template rendered it. A
    template that renders nothing of the probe ignores reasoning_content:
    an error. Without locate, only that check is made (None is returned).
    """
    msgs = example["messages"]
    probe = render(tokenizer, msgs[:i] + [dict(msgs[i], reasoning_content=REASONING_PROBE)],
                   tools=example.get("tools"))
    at = probe.find(REASONING_PROBE, len(prev))
    if not probe.startswith(prev) or at < 0:
        raise DataError(
            f"example {example.get('example_id', '')!r}: message {i} ({msgs[i]['role']}) has reasoning, but the "
            f"chat template renders nothing of reasoning_content: training would drop what the model "
            f"generated. Use the model's own template if it renders reasoning (Qwen3's renders <think> "
            f"blocks), or set WHALE_CHAT_TEMPLATE to one that does")
    if not locate:
        return None
    before, after = probe[len(prev):at], probe[at + len(REASONING_PROBE):]
    if piece.startswith(before) and piece.endswith(after) and len(before) + len(after) <= len(piece):
        return len(before), len(piece) - len(after)
    # A template that renders the reasoning in a way that depends on its
    # text: look for the text itself.
    text = msgs[i]["reasoning_content"].strip()
    at = piece.find(text, _common_prefix(before, piece))
    if at >= 0:
        return at, at + len(text)
    raise DataError(
        f"example {example.get('example_id', '')!r}: message {i} ({msgs[i]['role']}): cannot find where the "
        f"chat template renders its reasoning, so it cannot be masked (WHALE_TRAIN_REASONING=0); "
        f"set WHALE_TRAIN_REASONING=1 or WHALE_CHAT_TEMPLATE")


def _generation_header(tokenizer, first, tools=None):
    # With no earlier message there is no generation prompt to render; the
    # header is what the template puts before an empty assistant turn
    # (without its reasoning or tool calls, which the model wrote), the
    # system turn listing the tools included.
    return render(tokenizer, [{"role": first["role"], "content": ""}], tools=tools)


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


def features(example, tokenizer, max_length=None, train_reasoning=True):
    """Token ids and labels of one example; labels are IGNORE where masked.

    Each piece is tokenised on its own so that no token straddles a trained
    and an untrained piece. Longer examples are cut at max_length; one
    with no trained token left gives None.
    """
    ids, labels = [], []
    if "token_ids" in example:
        # Exactly the tokens the model saw and wrote: no re-tokenising, so
        # no drift between rollout and training. Reasoning is not told
        # apart in ids, so masking it needs the text path.
        if not train_reasoning and any(m.get("reasoning_content") for m in example["messages"]):
            raise DataError(f"example {example.get('example_id', '')!r}: WHALE_TRAIN_REASONING=0 cannot mask reasoning "
                            "inside exact token ids; train on reasoning, or roll out without return_token_ids")
        pieces = example["token_ids"]
    else:
        pieces = [(encode(tokenizer, text), trained) for text, trained in segments(example, tokenizer, train_reasoning)]
    for toks, trained in pieces:
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


def run_batches(feats, batch_size, epochs, seed):
    """The batch of every optimizer step of a run, in order: epoch e
    shuffles with seed + e. The order depends only on these arguments, so a
    resumed run finds its data position from the number of steps done."""
    for epoch in range(epochs):
        yield from batches(feats, batch_size, seed + epoch)


def micro_batches(batch, rank, world, micro_batch_size):
    """This rank's micro-batches of one optimizer step.

    Every rank gets the same number of them (the most any rank needs),
    padded with an all-masked copy of an example: FSDP all-gathers the
    weights in every forward, so ranks running different numbers of
    forwards would hang, and a DDP rank with no example must still run a
    backward. A padding micro-batch adds no loss and no gradient.
    """
    mine = batch[rank::world]
    n = math.ceil(len(batch[0::world]) / micro_batch_size)
    out = [mine[i: i + micro_batch_size] for i in range(0, len(mine), micro_batch_size)]
    pad = {"input_ids": batch[0]["input_ids"], "labels": [IGNORE] * len(batch[0]["labels"])}
    out += [[pad]] * (n - len(out))
    return out


def _grad_sync(model, on):
    """Skips DDP's gradient all-reduce (no_sync) on all but the last
    micro-batch of a step: each rank accumulates its whole gradient, as it
    holds the whole model anyway, and it is reduced once. FSDP2 keeps
    reduce-scattering after every micro-batch: skipping that would keep
    unsharded gradients of the whole model on every rank."""
    import contextlib
    if not on and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()


def train(model, optimizer, feats, *, batch_size, micro_batch_size, pad_id, device, epochs=1,
          seed=0, max_grad_norm=1.0, rank=0, world=1, log=print, all_reduce=None, autocast_dtype=None,
          start_step=0, losses=None, after_step=None):
    """Trains for epochs over feats; returns the loss of every step.

    Every optimizer step takes batch_size examples (the effective batch,
    across all ranks): each rank takes every world-th one and runs them
    micro_batch_size at a time, accumulating gradients, so a step runs
    ceil(batch_size / (world * micro_batch_size)) forwards per rank. Its
    loss is the summed token NLL of the whole step divided by its trained
    tokens, which every rank counts from the (shared) batch; DDP and FSDP
    average gradients over ranks, so each rank scales its sum by world.

    With world > 1, all_reduce(float) -> float sums over ranks (only for
    the logged loss). autocast_dtype (torch.bfloat16) runs forwards under
    autocast with float32 weights. start_step skips the steps a resumed
    run has done (losses holds theirs); after_step(step, losses) is called
    after every step, e.g. to checkpoint.
    """
    import contextlib

    import torch
    losses = list(losses or [])
    steps = math.ceil(len(feats) / batch_size) * epochs
    dev = torch.device(device)
    model.train()
    for step, batch in enumerate(run_batches(feats, batch_size, epochs, seed), 1):
        if step <= start_step:
            continue
        total = sum(trained_tokens(f) for f in batch)
        if total == 0:
            continue
        optimizer.zero_grad(set_to_none=True)
        step_sum = 0.0
        micro = micro_batches(batch, rank, world, micro_batch_size)
        for i, mb in enumerate(micro):
            ids, labels, attn = (t.to(dev) for t in collate(mb, pad_id))
            cast = torch.autocast(device_type=dev.type, dtype=autocast_dtype) if autocast_dtype \
                else contextlib.nullcontext()
            with _grad_sync(model, i == len(micro) - 1):
                with cast:
                    logits = _logits(model(input_ids=ids, attention_mask=attn))
                s, _ = masked_nll_sum(logits, labels)
                (s * world / total).backward()
            step_sum += float(s.detach())
        if max_grad_norm and max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
        optimizer.step()
        if all_reduce:
            step_sum = all_reduce(step_sum)
        losses.append(step_sum / total)
        if rank == 0:
            log(f"step {step}/{steps} loss {losses[-1]:.4f} tokens {total}")
        if after_step:
            after_step(step, losses)
    return losses


def train_epoch(model, optimizer, feats, *, seed=0, **kw):
    """One epoch over feats (train with epochs=1)."""
    return train(model, optimizer, feats, epochs=1, seed=seed, **kw)


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


# ---------------------------------------------------------------- resuming

RESUME_FORMAT = 1


def fingerprint(feats, settings):
    """What a checkpoint must have been trained on to be resumed: the
    tokenised examples (so the data, the tokenizer, the template and the
    masking) and the settings that change the result (base, learning
    rate, batch, seed, ...; not world size or micro-batch, which only
    change how a step is computed)."""
    import array
    import hashlib
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for f in feats:
        h.update(array.array("q", f["input_ids"]).tobytes())
        h.update(array.array("q", f["labels"]).tobytes())
        h.update(b"|")
    return h.hexdigest()


def base_identity(path, chunk=1 << 16):
    """Identifies a base checkpoint for fingerprint without reading all of
    it: a hub name as is; for a directory (whose path differs between the
    finetune stage's attempts), every file's name and size and a hash of
    its first, middle and last 64 KiB, which differ between two trained
    checkpoints of the same model since training changes every weight."""
    import hashlib
    if not os.path.isdir(path):
        return path
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(root, name)
            size = os.path.getsize(p)
            h.update(f"{os.path.relpath(p, path)}\0{size}\0".encode())
            with open(p, "rb") as f:
                for at in sorted({0, max(0, size // 2 - chunk // 2), max(0, size - chunk)}):
                    f.seek(at)
                    h.update(f.read(chunk))
    return "sha256:" + h.hexdigest()


def trainable_state(model):
    """The trainable parameters: all of them for a full fine-tune, the
    adapter for LoRA (the frozen base is reloaded from its checkpoint)."""
    return {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}


class PlainState:
    """Model and optimizer state as one file written by rank 0: for a
    single process and DDP, where every rank holds the same weights and
    optimizer state."""

    def save(self, path, model, optimizer, rank):
        import torch
        if rank == 0:
            torch.save({"model": trainable_state(model), "optimizer": optimizer.state_dict()},
                       os.path.join(path, "state.pt"))

    def load(self, path, model, optimizer, rank):
        import torch
        state = torch.load(os.path.join(path, "state.pt"), map_location="cpu")
        want = {n for n, p in model.named_parameters() if p.requires_grad}
        if set(state["model"]) != want:
            missing, extra = sorted(want - set(state["model"])), sorted(set(state["model"]) - want)
            raise DataError(f"{path}/state.pt: its parameters are not this model's trainable ones "
                            f"(missing {missing[:3]}, unexpected {extra[:3]})")
        model.load_state_dict(state["model"], strict=False)
        optimizer.load_state_dict(state["optimizer"])


def _rng_state():
    import torch
    st = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def _set_rng_state(st):
    import torch
    random.setstate(st["python"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


class Resume:
    """The trainer's own checkpoints, so that a killed run resumes.

    directory/step-NNNNNNNN holds, after optimizer step N: the model and
    optimizer state (state.save), every rank's RNG state, and meta.json
    (step, per-step losses, fingerprint, world size), written last; the
    directory is renamed into place only once complete, and older ones are
    then removed. The data position is the step count: run_batches gives
    the same batches for the same fingerprint. A checkpoint whose
    fingerprint differs (other data or settings) is discarded, and training
    starts over. With several nodes, directory must be on a filesystem all
    of them share.
    """

    def __init__(self, directory, fingerprint, *, rank=0, world=1, barrier=None, log=print, state=None):
        self.dir, self.fp, self.rank, self.world = directory, fingerprint, rank, world
        self.barrier = barrier or (lambda: None)
        self.log = log
        self.state = state or PlainState()

    def _complete(self):
        if not os.path.isdir(self.dir):
            return []
        done = [n for n in os.listdir(self.dir)
                if n.startswith("step-") and not n.endswith(".tmp")
                and os.path.isfile(os.path.join(self.dir, n, "meta.json"))]
        return sorted(done)

    def load(self, model, optimizer):
        """Restores the latest checkpoint; returns (steps done, their losses),
        (0, []) when there is none to resume."""
        done = self._complete()
        meta = None
        if done:
            path = os.path.join(self.dir, done[-1])
            with open(os.path.join(path, "meta.json")) as f:
                meta = json.load(f)
            if meta.get("format") != RESUME_FORMAT or meta.get("fingerprint") != self.fp:
                if self.rank == 0:
                    self.log(f"resume: {path} was trained on other data or settings; starting over")
                meta = None
        self.barrier()  # every rank has read it before rank 0 may remove it
        if meta is None:
            if self.rank == 0 and os.path.isdir(self.dir):
                for n in os.listdir(self.dir):
                    if n.startswith("step-"):
                        _rmtree(os.path.join(self.dir, n))
            self.barrier()
            return 0, []
        self.state.load(path, model, optimizer, self.rank)
        rng = os.path.join(path, f"rng-{self.rank}.pt")
        if meta.get("world") == self.world and os.path.isfile(rng):
            import torch
            _set_rng_state(torch.load(rng))
        elif self.rank == 0:
            self.log(f"resume: saved on {meta.get('world')} rank(s), running on {self.world}: RNG state not restored")
        if self.rank == 0:
            self.log(f"resume: from {path} after step {meta['step']}")
        return meta["step"], list(meta["losses"])

    def save(self, step, model, optimizer, losses):
        import torch
        final = os.path.join(self.dir, f"step-{step:08d}")
        tmp = final + ".tmp"
        if self.rank == 0:
            _rmtree(tmp)
            os.makedirs(tmp)
        self.barrier()
        self.state.save(tmp, model, optimizer, self.rank)
        torch.save(_rng_state(), os.path.join(tmp, f"rng-{self.rank}.pt"))
        self.barrier()
        if self.rank == 0:
            with open(os.path.join(tmp, "meta.json"), "w") as f:
                json.dump({"format": RESUME_FORMAT, "step": step, "losses": losses, "fingerprint": self.fp,
                           "world": self.world}, f)
            _rmtree(final)
            os.rename(tmp, final)
            for n in os.listdir(self.dir):
                if n.startswith("step-") and n != os.path.basename(final):
                    _rmtree(os.path.join(self.dir, n))
        self.barrier()

    def clear(self):
        """Removes the checkpoints once the final model is saved (and the
        directory, if nothing else is left in it)."""
        if self.rank == 0 and os.path.isdir(self.dir):
            for n in os.listdir(self.dir):
                if n.startswith("step-"):
                    _rmtree(os.path.join(self.dir, n))
            try:
                os.rmdir(self.dir)
            except OSError:
                pass


def _rmtree(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)
