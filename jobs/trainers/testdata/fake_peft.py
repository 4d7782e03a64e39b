"""Stands in for peft in tests: the names train_sft uses (LoraConfig,
get_peft_model, PeftModel.from_pretrained, save_pretrained), with a plain
low-rank adapter on the toy model's linear layers, so that the trainer's
LoRA path (a frozen base, a trainable adapter saved alone, an adapter as
the next step's base) runs without peft."""

import json
import os

import torch
from torch import nn

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.pt"


class LoraConfig:
    def __init__(self, r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type=None):
        self.r, self.lora_alpha, self.lora_dropout = r, lora_alpha, lora_dropout
        self.target_modules, self.task_type = target_modules, task_type


class LoraLinear(nn.Module):
    """base(x) + scale * B(A(x)), B starting at zero so that a new adapter
    leaves the model unchanged."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base, self.scale = base, alpha / r
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / base.in_features ** 0.5)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.lora_A.t() @ self.lora_B.t())


class PeftModel(nn.Module):
    def __init__(self, model, cfg):
        super().__init__()
        self.base_model, self.cfg = model, cfg
        for p in model.parameters():
            p.requires_grad_(False)
        for name, m in list(model.named_children()):
            if isinstance(m, nn.Linear) and (cfg.target_modules == "all-linear" or name in cfg.target_modules):
                setattr(model, name, LoraLinear(m, cfg.r, cfg.lora_alpha))

    def forward(self, **kw):
        return self.base_model(**kw)

    def adapter_state(self):
        return {n: p.detach().cpu() for n, p in self.named_parameters() if "lora_" in n}

    def save_pretrained(self, out, safe_serialization=True):
        with open(os.path.join(out, CONFIG), "w") as f:
            json.dump({"base_model_name_or_path": self.base_model.name_or_path, "r": self.cfg.r,
                       "lora_alpha": self.cfg.lora_alpha, "target_modules": self.cfg.target_modules}, f)
        torch.save(self.adapter_state(), os.path.join(out, WEIGHTS))

    @classmethod
    def from_pretrained(cls, model, path, is_trainable=False):
        with open(os.path.join(path, CONFIG)) as f:
            c = json.load(f)
        m = cls(model, LoraConfig(r=c["r"], lora_alpha=c["lora_alpha"], target_modules=c["target_modules"]))
        missing = set(m.adapter_state()) ^ set(torch.load(os.path.join(path, WEIGHTS)))
        if missing:
            raise ValueError(f"{path}: adapter keys differ: {sorted(missing)}")
        m.load_state_dict(torch.load(os.path.join(path, WEIGHTS)), strict=False)
        if not is_trainable:
            for p in m.parameters():
                p.requires_grad_(False)
        return m


def get_peft_model(model, cfg):
    return PeftModel(model, cfg)
