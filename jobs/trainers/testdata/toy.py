"""A toy character tokenizer with a ChatML-like chat template, and a tiny
bigram language model: enough to test whale_sft without transformers."""

import json
import os
import struct

import torch
from torch import nn

SPECIALS = ["<pad>", "<s>", "<|im_start|>", "<|im_end|>"]
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))


class ToyTokenizer:
    pad_token_id = 0
    eos_token_id = 3

    def __init__(self):
        self.vocab = {s: i for i, s in enumerate(SPECIALS)}
        for c in CHARS:
            self.vocab[c] = len(self.vocab)
        self.inv = {i: s for s, i in self.vocab.items()}

    def __len__(self):
        return len(self.vocab)

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **_):
        out = []
        for m in messages:
            body = m.get("content") or ""
            for c in m.get("tool_calls") or []:
                body += "<tool_call>" + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]}) + "</tool_call>"
            out.append("<|im_start|>" + m["role"] + "\n" + body + "<|im_end|>\n")
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
        text = "".join(out)
        return self.encode(text) if tokenize else text

    def encode(self, text, add_special_tokens=False):
        ids, i = [], 0
        if add_special_tokens:
            ids.append(self.vocab["<s>"])
        while i < len(text):
            for s in SPECIALS:
                if text.startswith(s, i):
                    ids.append(self.vocab[s])
                    i += len(s)
                    break
            else:
                ids.append(self.vocab.get(text[i], self.vocab["?"]))
                i += 1
        return ids

    def decode(self, ids):
        return "".join(self.inv[i] for i in ids)


def render_jinja(template, messages, add_generation_prompt=False, **kwargs):
    """Renders a chat template the way transformers' apply_chat_template
    does: a sandboxed jinja2 environment with trim_blocks and lstrip_blocks,
    its tojson filter and raise_exception."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt, **kwargs)


class JinjaTokenizer(ToyTokenizer):
    """ToyTokenizer's vocabulary with a Jinja chat template (source text)."""

    def __init__(self, chat_template):
        super().__init__()
        self.chat_template = chat_template

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **kw):
        text = render_jinja(self.chat_template, messages, add_generation_prompt=add_generation_prompt, **kw)
        return self.encode(text) if tokenize else text


class TinyLM(nn.Module):
    """Embedding + linear: each token predicts the next from itself alone."""

    def __init__(self, vocab, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.emb(input_ids))


class ToyHFTokenizer(ToyTokenizer):
    """ToyTokenizer with the bits of the transformers API train_sft uses;
    a chat_template set on it (WHALE_CHAT_TEMPLATE) is rendered with jinja2."""
    eos_token = "<|im_end|>"
    pad_token = "<pad>"
    chat_template = None

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **kw):
        if self.chat_template is None:
            return super().apply_chat_template(messages, tokenize, add_generation_prompt, **kw)
        text = render_jinja(self.chat_template, messages, add_generation_prompt=add_generation_prompt, **kw)
        return self.encode(text) if tokenize else text

    def save_pretrained(self, out):
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"toy": True}, f)


class ToyHFModel(TinyLM):
    """TinyLM saved and loaded the transformers way, as model.pt, next to
    the Hugging Face layout a vLLM server's loader checks for before it
    loads a directory (config.json and *.safetensors): the whole-run tests
    hand the toy's checkpoints to a fake vLLM that checks what vLLM does."""

    def save_pretrained(self, out, safe_serialization=True, state_dict=None):
        state = self.state_dict() if state_dict is None else state_dict
        torch.save(state, os.path.join(out, "model.pt"))
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump({"model_type": "whale_toy", "architectures": ["ToyHFModel"],
                       "vocab_size": self.out.out_features, "hidden_size": self.out.in_features}, f)
        if safe_serialization:
            write_safetensors(state, os.path.join(out, "model.safetensors"))


def write_safetensors(state, path):
    """The safetensors format by hand (Debian has no python3-safetensors):
    a little-endian u64 header length, a JSON header of dtype, shape and
    byte offsets per tensor (padded to 8 bytes), then the raw bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in state.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path):
        return ToyHFTokenizer()


class AutoModelForCausalLM:
    loaded_from = None

    @staticmethod
    def from_pretrained(path, torch_dtype=None):
        torch.manual_seed(0)
        model = ToyHFModel(len(ToyTokenizer()))
        model.name_or_path = path
        weights = os.path.join(path, "model.pt")
        if os.path.isfile(weights):
            model.load_state_dict(torch.load(weights))
            AutoModelForCausalLM.loaded_from = weights
        return model
