"""Shared fixtures: tiny offline models built from a config and a locally trained tokenizer."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CORPUS = [
    "Q: What is 3 + 5?\nA: #### 8",
    "Q: Reverse 1234.\nA: #### 4321",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ?",
    "Prompts of different lengths must be padded on the left for batched sampling.",
]


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An HF folder (Qwen3, ~0.9M params, untied) built and saved offline; load it by path."""
    from rlforge.models.tiny import build_tiny_model, train_tokenizer

    path = tmp_path_factory.mktemp("tiny_policy")
    tokenizer = train_tokenizer(CORPUS * 4, vocab_size=320)
    model = build_tiny_model(tokenizer, seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def tiny_policy(tiny_policy_dir: str):
    from rlforge.models import load_policy

    return load_policy(tiny_policy_dir)
