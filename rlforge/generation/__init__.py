"""Generators: how tokens are sampled (pure PyTorch here; vLLM behind the same protocol)."""

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
    "eos_token_ids",
    "filter_logits",
]
