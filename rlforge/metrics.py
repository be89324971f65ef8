"""RL metrics computed from rollouts and validation samples, and how each metric is reduced over a step.

Names are API (see DESIGN.md). Per-step reductions and validation scores are ``torchmetrics`` metrics, so they
sync across ranks when a process group is initialised. Reductions run in float64: a step mean equals
``sum(values) / len(values)`` of the logged Python floats bit for bit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from enum import StrEnum

import torch
from torchmetrics import Metric
from torchmetrics.aggregation import MaxMetric, MeanMetric, SumMetric

from rlforge.types import Group


class Reduce(StrEnum):
    """How the values a metric got in one step become its one value (torchforge's ``Reduce``)."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    LAST = "last"


REDUCTIONS = tuple(r.value for r in Reduce)

_REDUCE_BY_NAME: dict[str, str] = {
    # Counts: how many things happened in the step, not an average.
    "reward/errors": "sum",
    "train/skipped_steps": "sum",
    "rollout/restarts": "sum",
    "rollout/dropped_stale": "sum",
    "data/skipped_prompts": "sum",
}

DEFAULT_PASS_SAMPLES = 4
"""Samples per validation prompt for ``val/pass@1``/``val/pass@n`` when validation itself is greedy."""


def register_reduction(name: str, reduce: str) -> None:
    """Sets how ``name`` is reduced when it is logged several times in one step (default ``mean``).

    Args:
        name: Metric name, e.g. ``reward/errors``.
        reduce: ``mean``, ``sum``, ``max`` or ``last``.
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce={reduce!r} for metric {name!r}; choose one of {', '.join(REDUCTIONS)}")
    _REDUCE_BY_NAME[name] = str(reduce)


def reduction_of(name: str) -> str:
    """The registered reduction of ``name`` (``mean`` unless registered otherwise)."""
    return _REDUCE_BY_NAME.get(name, "mean")


class _StepMean(MeanMetric):
    """``MeanMetric`` fed a whole step at once, summed in order in float64 (the mean of Python floats, bit for bit).

    ``weights`` make it a weighted mean (a per-token mean logged with its token count stays a per-token mean
    over micro-batches and ranks); weights of 1 give exactly the unweighted sums (``v * 1.0 == v``).
    """

    def update(self, values: Sequence[float], weights: Sequence[float] | None = None) -> None:  # type: ignore[override]
        if weights is None:
            weights = [1.0] * len(values)
        self.mean_value += sum(v * w for v, w in zip(values, weights, strict=True))  # left-to-right float sum
        self.weight += sum(weights)


class _StepSum(SumMetric):
    """``SumMetric`` fed a whole step at once, summed in order in float64."""

    def update(self, values: Sequence[float], weights: Sequence[float] | None = None) -> None:  # type: ignore[override]
        self.sum_value += sum(values)


class _StepMax(MaxMetric):
    """``MaxMetric`` fed a whole step at once."""

    def update(self, values: Sequence[float], weights: Sequence[float] | None = None) -> None:  # type: ignore[override]
        if values:
            self.max_value = torch.maximum(self.max_value, torch.tensor(values, dtype=torch.float64).max())


_AGGREGATORS = {"mean": _StepMean, "sum": _StepSum, "max": _StepMax}


class StepReducer:
    """Reduces each step's logged values per metric name through persistent torchmetrics aggregators.

    One aggregator per name, created on first use and reset after each step (constructing a ``Metric`` costs
    milliseconds; reusing one costs microseconds). Values are kept as logged, NaN and inf included.
    """

    def __init__(self) -> None:
        self._metrics: dict[tuple[str, str], Metric] = {}

    def reduce(
        self, name: str, values: Sequence[float], reduce: str = "mean", weights: Sequence[float] | None = None
    ) -> float | None:
        """The ``reduce`` of ``values`` logged under ``name`` this step, over every rank's values when a process
        group runs (a rank with no values contributes none); ``None`` for ``last`` without values.

        Args:
            name: Metric name.
            values: The values logged this step, in order.
            reduce: ``mean``, ``sum`` or ``max``.
            weights: One weight per value for ``mean`` (default all 1); ignored by the other reductions.
        """
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce={reduce!r} for metric {name!r}; choose one of {', '.join(REDUCTIONS)}")
        if reduce == Reduce.LAST:  # the newest value: nothing to aggregate (and nothing to sync across ranks)
            return float(values[-1]) if values else None
        metric = self._metrics.get((name, reduce))
        if metric is None:
            metric = _AGGREGATORS[reduce](nan_strategy="disable").set_dtype(torch.float64)
            self._metrics[(name, reduce)] = metric
        metric.update([float(v) for v in values], weights)  # none on this rank: sum 0, weight 0, max -inf
        value = float(metric.compute())
        metric.reset()
        return value


def reduce_values(values: Sequence[float], reduce: str = "mean") -> float:
    """One-off reduction of ``values`` (``mean``/``sum``/``max``) through a fresh torchmetrics aggregator.

    Args:
        values: At least one value.
        reduce: ``mean``, ``sum`` or ``max``.
    """
    value = StepReducer().reduce("", values, reduce)
    assert value is not None  # at least one value
    return value


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al., 2021): ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the problem.
        c: Correct samples among them.
        k: Budget.
    """
    if not 0 < k <= n:
        raise ValueError(f"pass_at_k needs 0 < k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class ValAccuracy(Metric):
    """``val/accuracy``: the mean over prompts of the fraction of each prompt's samples that are correct."""

    full_state_update = False

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.add_state("score", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("prompts", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, correct: Sequence[Sequence[bool]]) -> None:
        """Adds prompts: ``correct[i][j]`` is whether sample ``j`` of prompt ``i`` was right."""
        for row in correct:
            if row:
                self.score += sum(bool(x) for x in row) / len(row)
                self.prompts += 1

    def compute(self) -> torch.Tensor:
        return self.score / self.prompts.clamp(min=1.0)


class PassAtK(Metric):
    """``val/pass@k``: the unbiased pass@k estimate averaged over prompts (each with ``n >= k`` samples).

    Args:
        k: Budget.
    """

    full_state_update = False

    def __init__(self, k: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        if k < 1:
            raise ValueError(f"PassAtK needs k >= 1, got {k}")
        self.k = k
        self.add_state("score", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("prompts", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, correct: Sequence[Sequence[bool]]) -> None:
        """Adds prompts: ``correct[i][j]`` is whether sample ``j`` of prompt ``i`` was right."""
        for row in correct:
            self.score += pass_at_k(len(row), sum(bool(x) for x in row), self.k)
            self.prompts += 1

    def compute(self) -> torch.Tensor:
        return self.score / self.prompts.clamp(min=1.0)


def rollout_metrics(groups: Sequence[Group], policy_version: int) -> dict[str, float]:
    """``rollout/*`` metrics of one step's groups."""
    episodes = [ep for group in groups for ep in group]
    rewards = [ep.reward for ep in episodes]
    lengths = [len(ep.completion.token_ids) for ep in episodes]
    zero_std = [len({ep.reward for ep in group}) <= 1 for group in groups]
    return {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/response_len": statistics.fmean(lengths),
        "rollout/truncated_frac": statistics.fmean(ep.completion.truncated for ep in episodes),
        "rollout/zero_std_frac": statistics.fmean(zero_std),
        "rollout/staleness": statistics.fmean(policy_version - ep.completion.policy_version for ep in episodes),
    }


def validation_metrics(
    correct: Sequence[Sequence[bool]], sampled: Sequence[Sequence[bool]] | None = None
) -> dict[str, float]:
    """``val/accuracy`` of ``correct``, and ``val/pass@1``/``val/pass@n`` of the ``n`` samples per prompt.

    The pass@k samples are ``sampled`` when given (greedy validation plus a sampled pass), else ``correct``
    itself when it has ``n > 1`` samples per prompt.

    Args:
        correct: Correctness of each validation sample, one row per prompt.
        sampled: Correctness of extra temperature samples for pass@k, one row of ``n`` per prompt.
    """
    if not correct:
        return {}
    accuracy = ValAccuracy()
    accuracy.update(correct)
    metrics = {"val/accuracy": float(accuracy.compute())}
    rows = sampled if sampled else correct
    n = min(len(row) for row in rows)
    if n > 1:
        for k in sorted({1, n}):
            metric = PassAtK(k)
            metric.update(rows)
            metrics[f"val/pass@{k}"] = float(metric.compute())
    return metrics
