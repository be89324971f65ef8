"""The generator protocol: what every sampler (pure PyTorch, vLLM, remote actor) provides."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from rlforge.generation.params import SamplingParams
from rlforge.types import Completion


@runtime_checkable
class Generator(Protocol):
    """Samples completions from its own copy of the policy weights.

    ``policy_version`` is the version of the weights last loaded with ``update_weights``; every
    returned ``Completion`` carries it, so the trainer can measure staleness.
    """

    policy_version: int

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Samples ``params.n`` completions for each prompt; returns one list per prompt."""
        ...

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Loads new policy weights and records their version."""
        ...
