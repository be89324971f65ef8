"""Loading a policy (model + tokenizer) from the bundled default, a local folder or the HF hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlforge.errors import ConfigError

DEFAULT_POLICY = "rlforge/default-policy"
"""Alias of the tiny policy shipped inside the package (works offline)."""

_ASSETS = Path(__file__).parent / "assets"
_ALIASES = {DEFAULT_POLICY: _ASSETS / "default_policy"}

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> str:
    """Maps a bundled alias to its folder; anything else (local path or hub id) passes through."""
    alias = _ALIASES.get(name_or_path)
    if alias is not None:
        if not (alias / "config.json").exists():
            raise ConfigError(
                f"model: bundled policy {name_or_path!r} is missing at {alias}; "
                "regenerate it with `python scripts/make_default_policy.py`"
            )
        return str(alias)
    return name_or_path


def load_policy(name_or_path: str, dtype: str = "float32", device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """Loads an HF causal LM and its tokenizer.

    Args:
        name_or_path: ``rlforge/default-policy``, a local HF folder, or a hub id such as
            ``Qwen/Qwen3-1.7B`` (needs network or a populated HF cache).
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        device: Where to place the model.

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left and has a pad token.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in _DTYPES:
        raise ConfigError(f"model dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])
    except OSError as err:
        hint = "" if Path(path).exists() else " (not a local folder: loading a hub id needs network or the HF cache)"
        raise ConfigError(f"model: cannot load {name_or_path!r}{hint}: {err}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer
