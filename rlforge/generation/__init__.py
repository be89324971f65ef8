"""Generators: how tokens are sampled (pure PyTorch here; vLLM behind the same protocol).

``VLLMGenerator`` is imported lazily (``rlforge.generation.VLLMGenerator``), so ``import rlforge`` never imports
vllm; constructing one without the ``vllm`` extra raises the one-line missing-extra error.
"""

from __future__ import annotations

from typing import Any

from rlforge.generation.base import Generator
from rlforge.generation.factory import GENERATORS, PolicySampler, build_generator
from rlforge.generation.params import SamplingParams
from rlforge.generation.torch_generator import TorchGenerator, eos_token_ids, filter_logits

__all__ = [
    "GENERATORS",
    "Generator",
    "PolicySampler",
    "build_generator",
    "SamplingParams",
    "TorchGenerator",
    "VLLMGenerator",
    "eos_token_ids",
    "filter_logits",
]


def __getattr__(name: str) -> Any:
    if name == "VLLMGenerator":
        from rlforge.generation.vllm_generator import VLLMGenerator

        return VLLMGenerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
