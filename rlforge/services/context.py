"""``RunContext``: the little a strategy and the rollout engine need to know about the run (never the trainer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

MetricSink = Callable[..., None]
"""``sink(name, value, reduce=None)``: records a metric for the current step (see ``rlforge.metrics.Reduce``)."""


def _drop(name: str, value: float, reduce: str | None = None) -> None:
    """The sink of a context built outside a trainer: metrics go nowhere."""


@dataclass(frozen=True)
class RunContext:
    """What a run is, for the layers below the trainer.

    Attributes:
        seed: The run's seed (samplers derive theirs from it).
        stage: ``fit``, ``validate`` or ``sft``-style fits (``fit``); services for rollouts are built only for ``fit``.
        device: Device of the trainable policy.
        sync_interval: Steps between weight syncs (the ``WeightSync`` callback's).
        max_steps: Steps of the run (prefetching stops before the last).
        log: Metric sink.
        rank: This process's data-parallel rank (0 alone; the ranks of one tensor-parallel group share it).
        world_size: Number of data-parallel replicas (1 alone).
        group_seeds: Each group samples from its own seed (``SamplingParams.seed``), drawn by the engine from
            the run seed, so rollouts do not depend on how groups are split over ranks or batched.
    """

    seed: int = 0
    stage: str = "fit"
    device: torch.device = torch.device("cpu")
    sync_interval: int = 1
    max_steps: int = 1
    log: MetricSink = _drop
    rank: int = 0
    world_size: int = 1
    group_seeds: bool = False
