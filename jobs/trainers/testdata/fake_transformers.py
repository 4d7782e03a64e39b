"""Stands in for transformers in tests: the toy tokenizer and model behind
the Auto* names train_sft uses."""

from toy import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
