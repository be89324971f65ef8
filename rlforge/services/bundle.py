"""``Services``: what ``Strategy.build`` returns, the only handle the trainer and rollout engine hold."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlforge.envs.episodes import EnvRunner
from rlforge.errors import ConfigError
from rlforge.models.adapter_sync import payload_bytes
from rlforge.services.protocols import Generator, Reference, Scorer

Weights = dict[str, torch.Tensor]

STALENESS_CORRECTIONS = ("tis", "ppo")


@dataclass(frozen=True)
class Staleness:
    """How far rollouts may lag the policy, and how the update corrects for it.

    Attributes:
        max_staleness: 0: each step samples with the newest weights. k >= 1: the next rollout is submitted before
            the update (sampling overlaps training where the generator runs elsewhere); episodes more than k
            versions older than the policy are dropped (``rollout/dropped_stale``).
        correction: ``tis`` (ratio against the current policy, advantages times the truncated importance
            weight; one no-grad forward) or ``ppo`` (the loss's ratio against the behaviour logprobs).
        tis_cap: Upper bound of the truncated importance weight.
    """

    max_staleness: int = 0
    correction: str = "tis"
    tis_cap: float = 2.0

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ConfigError(f"trainer.strategy.max_staleness must be >= 0, got {self.max_staleness}")
        if not self.tis_cap >= 1.0:
            raise ConfigError(f"trainer.strategy.tis_cap must be >= 1, got {self.tis_cap}")
        if self.correction not in STALENESS_CORRECTIONS:
            raise ConfigError(f"trainer.strategy.correction must be 'tis' or 'ppo', got {self.correction!r}")

    @property
    def asynchronous(self) -> bool:
        return self.max_staleness > 0


@dataclass
class Services:
    """The rollout-side services of one run, wherever they live.

    Attributes:
        sampler: Samples with the policy's CURRENT weights (validation).
        generator: Samples rollouts with its own copy of the weights, refreshed by ``sync``; ``None`` when the
            stage needs no rollouts (validation, SFT).
        reference: The KL reference model; ``None`` when no KL term was asked for at setup.
        scorer: Reward workers; ``None``: the module scores in this process.
        payload: What crosses at a weight sync (the policy's HF weights, merged for PEFT, or only its adapters).
        full_weights: The policy's full HF weights (restoring a generator that was in sync).
        staleness: Async-rollout settings (``RolloutEngine``).
        validate_on_generator: Validation samples with ``generator`` while it holds the current weights
            (vLLM: the engine is much faster than the in-process sampler).
        envs: The environments of multi-turn episodes (``rlforge.envs.EnvRunner``); ``None`` without
            ``module.environment``.
        rank0_samples: With several ranks, rank 0's services sample, score and reference the whole step and the
            groups are scattered (``MonarchStrategy``: one set of actors per run); the other ranks have no
            generator but still join each sync's weight gather through ``payload``.
    """

    sampler: Generator
    generator: Generator | None = None
    reference: Reference | None = None
    scorer: Scorer | None = None
    payload: Callable[[], Weights] | None = None
    full_weights: Callable[[], Weights] | None = None
    staleness: Staleness = Staleness()
    validate_on_generator: bool = False
    envs: EnvRunner | None = None
    rank0_samples: bool = False

    def current_sampler(self, policy_version: int) -> Generator:
        """The sampler of validation: the generator when it may and is in sync, else ``sampler``."""
        gen = self.generator
        if self.validate_on_generator and gen is not None and gen.policy_version == policy_version:
            return gen
        return self.sampler

    @torch.no_grad()
    def sync(self, version: int, log: Callable[..., None]) -> int | None:
        """Pushes the policy's weights to the generator as ``version``; logs ``perf/sync_s``/``perf/sync_bytes``."""
        if self.payload is None:
            return None
        start = time.perf_counter()
        payload = self.payload()  # with a sharded policy a gather: every rank calls it, generator or not
        if self.generator is None:
            return None
        self.generator.update_weights(payload, version)
        sent = payload_bytes(payload)
        log("perf/sync_s", time.perf_counter() - start)
        log("perf/sync_bytes", float(sent))
        return sent

    def state_dict(self, policy_version: int, step_only: bool = False) -> dict[str, Any]:
        """Generator RNG and version; with ``step_only`` false also stale generator and reference weights.

        Weights change only at a sync (after the update), so a step boundary needs only the RNG part.
        """
        gen = self.generator
        if gen is None:
            return {}
        state: dict[str, Any] = {"generator": gen.state_dict()}
        if step_only:
            return state
        if gen.policy_version != policy_version:  # stale weights differ from the policy's: keep them
            state["generator_weights"] = _cpu_copy(gen.weights_state_dict())  # type: ignore[attr-defined]
        reference_weights = self.reference.state_dict() if self.reference is not None else {}
        if reference_weights:
            state["reference_weights"] = _cpu_copy(reference_weights)
        return state

    def load_state_dict(self, state: dict[str, Any], weights: Weights | None = None) -> None:
        """Restores ``state_dict``: a generator without saved weights was in sync with the restored policy
        (``weights``: those weights, gathered already; default ``full_weights()``)."""
        gen = self.generator
        if not state or gen is None:
            return
        version = int(state["generator"].get("policy_version", gen.policy_version))
        gen.update_weights(state.get("generator_weights") or weights or self.full_weights(), version)
        gen.load_state_dict(state["generator"])
        if "reference_weights" in state and self.reference is not None:
            self.reference.load_weights(state["reference_weights"])


def _cpu_copy(state_dict: Weights) -> Weights:
    return {k: v.detach().to("cpu", copy=True) for k, v in state_dict.items()}
