"""The generator protocol: what every sampler (pure PyTorch, vLLM, remote actor) provides."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from rlforge.generation.params import SamplingParams
from rlforge.types import Completion


@runtime_checkable
class Generator(Protocol):
    """Samples completions from its own copy of the policy weights.

    ``policy_version`` is the version of the weights last loaded with ``update_weights``; every returned
    ``Completion`` carries it, so staleness is measured, never assumed. Implementations: ``TorchGenerator``,
    ``VLLMGenerator`` and the Monarch proxy ``RemoteGenerator`` (replicas of either). A generator may also
    offer ``submit(prompt_ids, params) -> Pending`` to sample in the background (see ``services.pending``).
    """

    policy_version: int

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Samples ``params.n`` completions for each prompt; returns one list per prompt."""
        ...

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Loads new policy weights (HF names) and records their version."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Sampler state for an exact resume (RNG, weight version)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict``."""
        ...
