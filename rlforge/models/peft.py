"""PEFT adapters (LoRA, ...) on the policy: wrap, count, merge for the generator, disable for the reference.

A policy module with ``peft`` set wraps its HF model with ``peft.get_peft_model``; only the adapter
parameters train. Everything outside the module sees the wrapped policy through these helpers:

* generators receive ``generator_weights(policy)``: the base weights with the adapters merged in, under the
  plain HF names (the generator holds an ordinary HF model, or vLLM reloads them), computed without
  touching the trained model;
* the reference model is the same model with its adapters disabled (``base_model(policy)``): no second
  copy of the weights;
* checkpoints hold the PEFT adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) that
  ``peft.PeftModel.from_pretrained(base, folder)`` loads; ``load_adapter`` restores it exactly.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlforge.errors import CheckpointError, ConfigError
from rlforge.imports import require

log = logging.getLogger("rlforge")

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_peft_config(config: Any, backend: str = "hf", field: str = "module.peft") -> Any:
    """The PEFT config ``config`` stands for; fails early on a missing ``peft`` extra, a value that is not a
    PEFT config, or the titan backend.

    From YAML/CLI the value arrives as ``{class_path, init_args}`` data (the CLI never instantiates ``Any``
    fields, so a config cannot run code): it is built here, and only when the class is a ``peft.PeftConfig``.
    """
    if config is None:
        return None
    require("peft", field)
    from peft import PeftConfig

    if not isinstance(config, PeftConfig) and hasattr(config, "get") and config.get("class_path"):
        import importlib

        from jsonargparse import Namespace

        spec = config.as_dict() if isinstance(config, Namespace) else dict(config)
        module_name, _, name = str(spec["class_path"]).rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name or "peft"), name)
        except Exception as err:
            raise ConfigError(f"{field}.class_path: cannot import {spec['class_path']!r}: {err}") from err
        if not (isinstance(cls, type) and issubclass(cls, PeftConfig)):
            raise ConfigError(f"{field}.class_path must name a peft config class, got {spec['class_path']!r}")
        defaults = cls()
        kwargs = {}
        for key, value in dict(spec.get("init_args") or {}).items():
            default = getattr(defaults, key, None)
            # Nested dataclass options (e.g. LoRA's runtime_config) arrive as plain dicts.
            is_nested = isinstance(value, dict) and dataclasses.is_dataclass(default)
            kwargs[key] = type(default)(**value) if is_nested else value
        config = cls(**kwargs)
    if not isinstance(config, PeftConfig):
        raise ConfigError(
            f"{field} must be a PEFT config given by class_path, e.g. "
            "'{class_path: peft.LoraConfig, init_args: {r: 8, target_modules: all-linear}}', "
            f"got {type(config).__name__}"
        )
    if backend != "hf":
        raise ConfigError(
            f"{field} is not supported by module.backend={backend!r} (torchtitan models are not PEFT models); "
            "use backend 'hf' for LoRA"
        )
    return config


def is_peft_model(policy: Any) -> bool:
    """True when ``policy`` is a ``peft.PeftModel`` (never imports peft when it is not installed)."""
    return any(cls.__module__.startswith("peft.") and cls.__name__ == "PeftModel" for cls in type(policy).__mro__)


def apply_peft(policy: nn.Module, config: Any) -> nn.Module:
    """Wraps ``policy`` with ``peft.get_peft_model`` (base weights frozen, adapters trainable) and logs the counts.

    Args:
        policy: An HF causal LM.
        config: A ``peft.PeftConfig`` (e.g. ``peft.LoraConfig``); copied, so the caller's object is unchanged.

    Returns:
        The ``PeftModel``.
    """
    from peft import get_peft_model

    config = copy.deepcopy(config)
    if getattr(config, "task_type", None) is None:
        config.task_type = "CAUSAL_LM"  # PeftModelForCausalLM: the wrapper whose forward an HF causal LM expects
    model = get_peft_model(policy, config)
    trainable, total = trainable_parameters(model)
    log.info(
        "rlforge: %s adapters: %d of %d parameters trainable (%.2f%%)",
        type(config).__name__,
        trainable,
        total,
        100.0 * trainable / max(total, 1),
    )
    return model


def trainable_parameters(policy: nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (shared tensors counted once)."""
    seen: set[int] = set()
    trainable = total = 0
    for param in policy.parameters():
        if id(param) in seen:
            continue
        seen.add(id(param))
        total += param.numel()
        trainable += param.numel() if param.requires_grad else 0
    return trainable, total


def plain_lora_layers(model: nn.Module) -> dict[str, nn.Module] | None:
    """Plain LoRA layers by module name, or ``None`` when any adapter needs PEFT's own merge (DoRA, bias, ...)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    layers: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            return None
        if not isinstance(module, BaseTunerLayer):
            continue
        if not isinstance(module, LoraLayer) or module.merged or not hasattr(module.get_base_layer(), "weight"):
            return None
        for adapter in module.active_adapters:
            if adapter in module.lora_variant or module.lora_bias.get(adapter, False):
                return None
        layers[name] = module
    return layers


@torch.no_grad()
def merged_state_dict(policy: nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights with the active adapters merged, under the base model's HF names.

    The trained model is not modified. Plain LoRA adds ``get_delta_weight`` to each adapted weight (the sum
    ``merge_and_unload`` computes); any other adapter type is merged on a deep copy.
    """
    if not is_peft_model(policy):
        return policy.state_dict()
    model = policy.get_base_model()
    layers = plain_lora_layers(model)
    if layers is None:
        return copy.deepcopy(policy).merge_and_unload().state_dict()
    merged: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        owner = next((name for name in _prefixes(key) if name in layers), None)
        if owner is None:
            merged[key] = tensor
            continue
        rest = key[len(owner) + 1 :]
        if not rest.startswith("base_layer."):
            continue  # adapter parameters (lora_A/lora_B/...) are folded into the weight below
        name = f"{owner}.{rest[len('base_layer.') :]}"
        if rest == "base_layer.weight":
            layer = layers[owner]
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    # As merge's in-place `+=`: added in the promoted dtype (fp32 adapters on a bf16 base), then cast.
                    tensor = (tensor + layer.get_delta_weight(adapter)).to(tensor.dtype)
        merged[name] = tensor
    return merged


def _prefixes(key: str) -> Iterator[str]:
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        yield ".".join(parts[:end])


def generator_weights(policy: nn.Module) -> dict[str, torch.Tensor]:
    """What a generator loads: ``merged_state_dict`` for a PEFT policy, else ``policy.state_dict()`` (gathered
    from every rank when the policy is sharded: a collective, every rank calls it at a sync)."""
    from rlforge.parallel.fsdp import full_state_dict, needs_gather

    if is_peft_model(policy):
        return merged_state_dict(policy)
    return full_state_dict(policy) if needs_gather(policy) else policy.state_dict()


def adapter_state_dict(policy: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter tensors (``peft.get_peft_model_state_dict``), as saved in ``adapter_model.safetensors``."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(policy)


def merged_copy(policy: nn.Module) -> nn.Module:
    """A plain HF model (no PEFT layers) holding the merged weights, frozen: a generator's own copy."""
    model = copy.deepcopy(policy).merge_and_unload() if is_peft_model(policy) else copy.deepcopy(policy)
    return model.requires_grad_(False)


@contextlib.contextmanager
def base_model(policy: nn.Module) -> Iterator[nn.Module]:
    """The reference model: ``policy`` with its adapters disabled (and in eval mode) inside the block."""
    was_training = policy.training
    policy.eval()
    try:
        with policy.disable_adapter():
            yield policy
    finally:
        policy.train(was_training)


def is_adapter_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds a PEFT adapter (``adapter_config.json`` and its weights)."""
    folder = Path(folder)
    return (folder / ADAPTER_CONFIG).is_file() and (folder / ADAPTER_WEIGHTS).is_file()


def load_adapter(policy: nn.Module, folder: str | Path) -> None:
    """Loads ``folder``'s adapter weights into the PEFT ``policy`` in place; every adapter tensor must match."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(folder)
    if not is_peft_model(policy):
        raise CheckpointError(
            f"{folder} holds a PEFT adapter but the policy has none: set module.peft as in the run that wrote it"
        )
    if not is_adapter_folder(folder):
        raise CheckpointError(f"{folder}: no PEFT adapter ({ADAPTER_CONFIG} + {ADAPTER_WEIGHTS}) for the LoRA policy")
    weights = load_file(str(folder / ADAPTER_WEIGHTS))
    expected = set(adapter_state_dict(policy))
    if set(weights) != expected:
        missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise CheckpointError(
            f"{folder}: adapter does not match module.peft (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    set_peft_model_state_dict(policy, weights)


def base_model_path(folder: str | Path) -> str:
    """The base model an adapter folder was trained on (``base_model_name_or_path`` of its config)."""
    import json

    config = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise CheckpointError(f"{folder}/{ADAPTER_CONFIG} names no base model: pass --base MODEL")
    return str(base)


def load_merged(folder: str | Path, dtype: Any = "auto", base: str | None = None) -> nn.Module:
    """``base`` (default: the adapter's own base) with ``folder``'s adapter merged in: a plain HF model."""
    require("peft", f"loading the adapter folder {folder}")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlforge.models.loading import resolve_model_path

    name = base or base_model_path(folder)
    try:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=dtype)
    except OSError as err:
        raise CheckpointError(f"{folder}: cannot load the base model {name!r} (pass --base MODEL): {err}") from err
    # PEFT froze the base weights; the merged model is an ordinary (trainable) HF model again.
    return PeftModel.from_pretrained(model, str(folder)).merge_and_unload().requires_grad_(True)


def save_merged(folder: str | Path, out_dir: str | Path, base: str | None = None) -> None:
    """Loads ``base`` (default: the adapter's own base) with ``folder``'s adapter, merges, saves a plain HF folder.

    Args:
        folder: A PEFT adapter folder (an rlforge checkpoint's ``policy/``).
        out_dir: Destination (an existing, empty folder).
        base: Base model (local folder, hub id or ``rlforge/default-policy``).
    """
    load_merged(folder, "auto", base).save_pretrained(str(out_dir), safe_serialization=True)
