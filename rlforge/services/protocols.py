"""The service protocols: what every backend implements, in this process or behind a Monarch actor.

``Generator`` lives in ``rlforge.generation.base`` (its implementations do too) and is re-exported here.

The trainer and the ``RolloutEngine`` only ever talk to these; a strategy decides what stands behind them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from rlforge.generation.base import Generator
from rlforge.rewards.runner import RewardResult
from rlforge.types import TrainBatch


@runtime_checkable
class Reference(Protocol):
    """The frozen reference model of the KL term."""

    def logprobs(self, batch: TrainBatch, temperature: float) -> torch.Tensor:
        """Reference logprobs of the batch's response tokens, ``[B, T]``, on the batch's device."""
        ...

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replaces the reference weights (resume of a run whose reference was moved)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Scores responses: ``RewardRunner`` in process, reward actors on Monarch."""

    def __call__(self, prompts: list[str], responses: list[str], targets: list[str]) -> RewardResult:
        """One reward per response, its breakdown and the step's ``reward/*`` metrics."""
        ...


__all__ = ["Generator", "Reference", "Scorer"]
