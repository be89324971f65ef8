"""``Strategy``: WHERE the generator, reference model and reward workers run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

from rlforge.generation import SamplingParams
from rlforge.types import Completion, Episode, Group, TrainBatch

if TYPE_CHECKING:
    import rlforge


class Strategy(ABC):
    """Places the policy and runs the rollout-side services for the trainer.

    The trainer only talks to this interface; it never imports monarch or vllm.
    """

    @abstractmethod
    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Places the policy and builds the generator (and the reference model when ``module.beta > 0``)."""

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """Device of the trainable policy."""

    @property
    @abstractmethod
    def generator_version(self) -> int:
        """Policy version of the weights the rollout generator holds."""

    @abstractmethod
    def generate(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Samples with the rollout generator (possibly stale weights)."""

    @abstractmethod
    def generate_with_policy(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Samples with the current policy weights (validation)."""

    @abstractmethod
    def reference_logprobs(self, module: rlforge.RLModule, batch: TrainBatch) -> torch.Tensor:
        """Reference-model logprobs of the batch's response tokens, ``[B, T]``."""

    @abstractmethod
    def sync_weights(self, module: rlforge.RLModule, version: int) -> int | None:
        """Pushes the policy weights to the generator as ``version``; returns the bytes sent (``None``: not counted)."""

    def rollout(self, module: rlforge.RLModule, rows: list[dict[str, Any]]) -> list[Group]:
        """Samples ``module.group_size`` completions per prompt row and wraps them as episodes."""
        prompt_ids = [module.encode_prompt(row["prompt"]) for row in rows]
        completions = self.generate(module, prompt_ids, module.sampling)
        return [
            [Episode(prompt=row["prompt"], target=str(row["target"]), completion=c) for c in group]
            for row, group in zip(rows, completions, strict=True)
        ]

    def next_rollout(self, module: rlforge.RLModule, datamodule: rlforge.RLDataModule) -> list[Group]:
        """Rolls out the next training prompts (asynchronous strategies prefetch and overlap here)."""
        return self.rollout(module, datamodule.next_batch())

    def prepare_batch(self, module: rlforge.RLModule, batch: TrainBatch) -> TrainBatch:
        """Last look at a collated batch before the update (off-policy correction of stale rollouts)."""
        return batch

    def score(self, module: rlforge.RLModule, groups: list[Group]) -> dict[str, float]:
        """Computes rewards (in-process by default; remote strategies use reward workers)."""
        return module.score(groups)

    def state_dict(self) -> dict[str, Any]:
        """Generator-side state for exact resume (RNG, weight version, stale weights)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict``."""

    def step_state_dict(self) -> dict[str, Any]:
        """The entries of ``state_dict`` that change during a step before weights do (e.g. sampler RNG).

        Captured at every step boundary so a failed step can be checkpointed as the previous one;
        override with a cheap subset when ``state_dict`` copies weights.
        """
        return self.state_dict()

    def teardown(self) -> None:
        """Releases workers and memory."""
