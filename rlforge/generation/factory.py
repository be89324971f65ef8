"""Choosing a generator by name: what strategies call to build their rollout sampler."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from torch import nn

from rlforge.errors import ConfigError
from rlforge.generation.base import Generator
from rlforge.generation.compiled_step import is_compile_mode
from rlforge.generation.params import SamplingParams
from rlforge.generation.torch_generator import TorchGenerator
from rlforge.imports import require
from rlforge.models.peft import generator_weights, is_peft_model, merged_copy
from rlforge.types import Completion

GENERATORS = ("torch", "vllm")
"""Names accepted by ``build_generator`` (and ``LocalStrategy(generator=...)``)."""


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


TORCH_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "static_cache": (_is_bool, "true or false"),
    "compile": (is_compile_mode, "true, false or 'auto'"),
    "compile_after_s": (_is_seconds, "a number of seconds >= 0"),
    "cpu_kernels": (_is_bool, "true or false"),
}
"""``TorchGenerator`` keyword arguments a config may set (``generator_options`` / ``generator.options``): each
with its check, since a string such as ``"false"`` would otherwise switch a feature on."""


def check_generator_name(kind: str, field: str = "trainer.strategy.generator") -> None:
    """Raises ``ConfigError`` for an unknown generator name, ``MissingDependencyError`` for a missing extra."""
    if kind not in GENERATORS:
        raise ConfigError(f"{field} must be one of {GENERATORS}, got {kind!r}")
    if kind == "vllm":
        require("vllm", f"{field}='vllm'")


def check_generator_options(
    kind: str, options: dict[str, Any], field: str = "trainer.strategy.generator_options"
) -> None:
    """Raises ``ConfigError`` naming the option for a ``torch`` generator option it does not take or a bad value.

    vLLM's options are its engine's keyword arguments, which vLLM checks itself.
    """
    if kind != "torch":
        return
    unknown = sorted(set(options) - set(TORCH_OPTIONS))
    if unknown:
        raise ConfigError(f"{field}: TorchGenerator takes none of {unknown} (it takes {', '.join(TORCH_OPTIONS)})")
    for name, value in options.items():
        valid, expected = TORCH_OPTIONS[name]
        if not valid(value):
            raise ConfigError(f"{field}.{name} must be {expected}, got {value!r}")


def hf_copy(policy: nn.Module) -> nn.Module:
    """A frozen HF causal LM holding the policy's current weights (the sampler's own copy).

    Policies that are not HF models (the torchtitan backend) provide ``to_hf_model()``; a PEFT policy
    becomes a plain HF model with its adapters merged.
    """
    if is_peft_model(policy):
        return merged_copy(policy)
    to_hf = getattr(policy, "to_hf_model", None)
    model = to_hf() if callable(to_hf) else copy.deepcopy(policy)
    return model.requires_grad_(False)


def build_generator(
    kind: str,
    policy: nn.Module,
    tokenizer: Any,
    seed: int = 0,
    policy_version: int = 0,
    options: dict[str, Any] | None = None,
    *,
    copy_weights: bool = True,
    field: str = "trainer.strategy.generator",
    options_field: str = "trainer.strategy.generator_options",
) -> Generator:
    """Builds a rollout generator: the ONE factory of every strategy (in process and inside Monarch replicas).

    Args:
        kind: ``torch`` (``TorchGenerator``) or ``vllm`` (``VLLMGenerator``, needs the ``vllm`` extra).
        policy: The trainable policy (HF model, or anything with ``to_hf_model()``/``save_pretrained``).
        tokenizer: Its tokenizer.
        seed: Sampler seed.
        policy_version: Version of the policy's current weights.
        options: Extra keyword arguments of the generator class (e.g. vLLM's ``gpu_memory_utilization``).
        copy_weights: Give a ``torch`` generator its own copy of ``policy`` (``False``: ``policy`` already is the
            caller's private copy, as in a Monarch replica, and is sampled in place).
        field: The config field of ``kind``, named in errors.
        options_field: The config field of ``options``, named in errors.
    """
    check_generator_name(kind, field)
    options = dict(options or {})
    check_generator_options(kind, options, options_field)
    if kind == "torch":
        model = hf_copy(policy) if copy_weights else policy
        return TorchGenerator(model, tokenizer, seed=seed, policy_version=policy_version, **options)
    from rlforge.generation.vllm_generator import VLLMGenerator

    # vLLM starts from a saved HF folder: a PEFT policy is saved merged; later syncs reload merged weights.
    source = merged_copy(policy) if is_peft_model(policy) else policy
    return VLLMGenerator.from_policy(source, tokenizer, seed=seed, policy_version=policy_version, **options)


class PolicySampler:
    """Samples with the policy's CURRENT weights (validation), whatever the policy backend.

    An HF policy is sampled in place. A non-HF policy (``to_hf_model()``) or a PEFT policy is mirrored into an
    HF copy whose weights are refreshed from ``policy.state_dict()`` (HF names; merged for PEFT) before each call.

    Args:
        policy: The trainable policy.
        tokenizer: Its tokenizer.
        seed: Sampler seed.
    """

    def __init__(self, policy: nn.Module, tokenizer: Any, seed: int = 0) -> None:
        self.policy = policy
        self._mirrored = callable(getattr(policy, "to_hf_model", None)) or is_peft_model(policy)
        self._tokenizer, self._seed = tokenizer, seed
        # A PEFT mirror is one more copy of the model: built only if validation ever samples here (with vLLM
        # validation usually samples in the engine instead).
        lazy = is_peft_model(policy)
        self.generator = None if lazy else self._build()

    def _build(self) -> TorchGenerator:
        model = hf_copy(self.policy) if self._mirrored else self.policy
        return TorchGenerator(model, self._tokenizer, seed=self._seed)

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        if self.generator is None:
            self.generator = self._build()
        if self._mirrored:
            self.generator.update_weights(generator_weights(self.policy), self.generator.policy_version)
        return self.generator.generate(prompt_ids, params)
