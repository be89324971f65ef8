"""Generators: how tokens are sampled (pure PyTorch here; vLLM behind the same protocol)."""

from rlforge.generation.base import Generator
from rlforge.generation.params import SamplingParams
from rlforge.generation.torch_generator import TorchGenerator, eos_token_ids, filter_logits

__all__ = ["Generator", "SamplingParams", "TorchGenerator", "eos_token_ids", "filter_logits"]
