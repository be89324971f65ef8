"""``StepMetrics``: values carry their reduction; late values reach the loggers at the step that just ended."""

from __future__ import annotations

import math

from rlforge.metrics import Reduce
from rlforge.trainer.step_metrics import StepMetrics


class _Logger:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append((metrics, step))


def test_each_value_carries_its_reduction():
    logger, latest = _Logger(), {}
    metrics = StepMetrics([logger], latest)
    for value in (1.0, 4.0, 2.0):
        metrics.record("a/mean", value)
        metrics.record("a/sum", value, Reduce.SUM)
        metrics.record("a/max", value, "max")
        metrics.record("a/last", value, Reduce.LAST)
    metrics.record("reward/errors", 2.0)  # registered as a count in rlforge.metrics: summed
    metrics.record("reward/errors", 5.0)
    out = metrics.flush(7)
    assert out == {"a/mean": 7.0 / 3, "a/sum": 7.0, "a/max": 4.0, "a/last": 2.0, "reward/errors": 7.0}
    assert logger.calls == [(out, 7)] and latest == out


def test_a_weighted_mean_counts_each_value_by_its_weight():
    """Per-token means of micro-batches with unequal token counts average to the per-token mean of the step."""
    metrics = StepMetrics([], {})
    metrics.record("train/kl", 0.5, weight=6.0)  # 6 tokens with mean 0.5
    metrics.record("train/kl", 2.0, weight=2.0)  # 2 tokens with mean 2.0
    metrics.record("train/entropy", 0.1)
    metrics.record("train/entropy", 0.2)  # unweighted values keep the exact sum of Python floats
    metrics.record("reward/errors", 2.0, weight=5.0)  # a weight does not touch a sum
    out = metrics.flush(1)
    assert out == {"train/kl": (6 * 0.5 + 2 * 2.0) / 8, "train/entropy": (0.1 + 0.2) / 2, "reward/errors": 2.0}


def test_values_after_the_flush_go_straight_to_the_step_that_ended():
    logger, latest = _Logger(), {}
    metrics = StepMetrics([logger], latest)
    metrics.record("train/loss", 1.0)
    metrics.flush(3)
    metrics.record("guard/kl_exceeded", 1.0)  # a callback's decision in on_train_step_end
    assert logger.calls[-1] == ({"guard/kl_exceeded": 1.0}, 3) and latest["guard/kl_exceeded"] == 1.0
    metrics.open()
    metrics.record("train/loss", float("nan"))
    assert metrics.logged("train/") == {"train/loss": metrics.logged()["train/loss"]}
    assert math.isnan(metrics.flush(4)["train/loss"])
