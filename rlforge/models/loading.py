"""Loading a policy (model + tokenizer) from the bundled default, a local folder or the HF hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlforge.errors import ConfigError
from rlforge.imports import require
from rlforge.progress_bars import quiet_loading_bars

DEFAULT_POLICY = "rlforge/default-policy"
"""Alias of the tiny policy shipped inside the package (works offline)."""

AGENT_TOOL_POLICY = "rlforge/agent-tool-policy"
"""Alias of the shipped tiny tool-calling policy (task ``tool_multiply``, ``configs/agent_tool.yaml``)."""

AGENT_MULTITURN_POLICY = "rlforge/agent-multiturn-policy"
"""Alias of the shipped tiny multi-turn policy (task ``guess_number``, ``configs/agent_multiturn.yaml``)."""

_ASSETS = Path(__file__).parent / "assets"
_ALIASES = {
    DEFAULT_POLICY: _ASSETS / "default_policy",
    AGENT_TOOL_POLICY: _ASSETS / "agent_tool_policy",
    AGENT_MULTITURN_POLICY: _ASSETS / "agent_multiturn_policy",
}
_SCRIPTS = {DEFAULT_POLICY: "scripts/make_default_policy.py"}

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> str:
    """Maps a bundled alias to its folder; anything else (local path or hub id) passes through."""
    alias = _ALIASES.get(name_or_path)
    if alias is not None:
        if not (alias / "config.json").exists():
            raise ConfigError(
                f"model: bundled policy {name_or_path!r} is missing at {alias}; "
                f"regenerate it with `python {_SCRIPTS.get(name_or_path, 'scripts/make_agent_policies.py')}`"
            )
        return str(alias)
    return name_or_path


BACKENDS = ("hf", "titan")
"""Policy backends: ``hf`` (transformers ``AutoModelForCausalLM``) and ``titan`` (torchtitan, ``TitanPolicy``)."""


def check_backend(backend: str, backend_options: dict[str, Any] | None = None) -> None:
    """Fails early on an unknown backend, options for the wrong backend, or a missing extra."""
    if backend not in BACKENDS:
        raise ConfigError(f"module.backend must be one of {BACKENDS}, got {backend!r}")
    if backend_options and backend != "titan":
        raise ConfigError(f"module.backend_options only apply to backend 'titan', got backend {backend!r}")
    if backend == "titan":
        require("titan", "module.backend='titan'")


def load_policy(
    name_or_path: str,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
    backend: str = "hf",
    backend_options: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """Loads a causal LM and its tokenizer.

    Args:
        name_or_path: ``rlforge/default-policy``, a local HF folder, or a hub id such as
            ``Qwen/Qwen3-1.7B`` (needs network or a populated HF cache); a PEFT adapter folder (a LoRA
            checkpoint's ``policy/``) loads as its base model with the adapters merged.
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        device: Where to place the model.
        backend: ``hf`` (transformers) or ``titan`` (torchtitan model with HF-named weights; needs the
            ``titan`` extra).
        backend_options: ``TitanPolicy.from_pretrained`` arguments for ``titan`` (``flavor``, ``attention``,
            ``parallelize``, ``tensor_parallel_degree``).

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left and has a pad token.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlforge.models.peft import is_adapter_folder, load_merged

    if dtype not in _DTYPES:
        raise ConfigError(f"model dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    check_backend(backend, backend_options)
    path = resolve_model_path(name_or_path)
    try:
        with quiet_loading_bars():
            tokenizer = AutoTokenizer.from_pretrained(path)
            if backend == "titan":
                from rlforge.models.titan_policy import TitanPolicy

                model = TitanPolicy.from_pretrained(path, dtype=dtype, device=device, **(backend_options or {}))
            elif is_adapter_folder(path):  # a LoRA run's policy/ folder: its base with the adapters merged
                model = load_merged(path, _DTYPES[dtype])
            else:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])
    except OSError as err:
        hint = "" if Path(path).exists() else " (not a local folder: loading a hub id needs network or the HF cache)"
        raise ConfigError(f"model: cannot load {name_or_path!r}{hint}: {err}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer
