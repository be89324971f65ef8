"""Builds the generator an actor samples with, by name (``trainer.strategy.generator_backend``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from rlforge.errors import ConfigError
from rlforge.generation import TorchGenerator

GeneratorFactory = Callable[[nn.Module, Any, int, int], Any]


def _torch_generator(model: nn.Module, tokenizer: Any, seed: int, policy_version: int) -> TorchGenerator:
    return TorchGenerator(model, tokenizer, seed=seed, policy_version=policy_version)


GENERATOR_BACKENDS: dict[str, GeneratorFactory] = {"torch": _torch_generator}
"""Name -> ``factory(model, tokenizer, seed, policy_version)``; a vLLM backend registers here."""


def build_generator(backend: str, model: nn.Module, tokenizer: Any, seed: int, policy_version: int = 0) -> Any:
    """A generator (``generate``/``update_weights``/``state_dict``) over ``model``.

    Args:
        backend: A key of ``GENERATOR_BACKENDS``.
        model: The actor's copy of the policy.
        tokenizer: The policy's tokenizer.
        seed: Sampler seed.
        policy_version: Version of the weights ``model`` holds.
    """
    check_backend(backend)
    return GENERATOR_BACKENDS[backend](model, tokenizer, seed, policy_version)


def check_backend(backend: str) -> None:
    """Raises ``ConfigError`` for an unknown backend name."""
    if backend not in GENERATOR_BACKENDS:
        raise ConfigError(
            f"trainer.strategy.generator_backend must be one of {sorted(GENERATOR_BACKENDS)}, got {backend!r}"
        )
