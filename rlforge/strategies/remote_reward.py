"""``RemoteRewardRunner``: a drop-in for ``RewardRunner`` that scores shards on ``RewardActor``s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlforge.rewards import RewardResult, RewardRunner
from rlforge.strategies import mesh


class RemoteRewardRunner:
    """Splits a batch into contiguous shards, one per worker, and merges the results in order.

    ``reward/errors`` is summed; every other metric (``reward/<name>_mean``) is the shard-size-weighted mean.
    Each worker applies the error budget to its own shard.

    Args:
        workers: Single-actor meshes of ``RewardActor``.
        local: The module's original runner (names, weights; kept for ``reward_fns`` introspection).
        timeout_s: Time limit of one shard.
    """

    def __init__(self, workers: Sequence[Any], local: RewardRunner, timeout_s: float) -> None:
        self.workers, self.local, self.timeout_s = list(workers), local, timeout_s
        self.reward_fns, self.weights, self.names = local.reward_fns, local.weights, local.names

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], targets: Sequence[str]) -> RewardResult:
        n, k = len(prompts), len(self.workers)
        bounds = [n * i // k for i in range(k + 1)]
        calls = [
            (lo, hi, w.score.call_one(list(prompts[lo:hi]), list(responses[lo:hi]), list(targets[lo:hi])))
            for w, lo, hi in zip(self.workers, bounds[:-1], bounds[1:], strict=True)
            if hi > lo
        ]
        merged = RewardResult(rewards=[], breakdown=[], metrics={})
        sums: dict[str, float] = {}
        for i, (lo, hi, future) in enumerate(calls):
            part: RewardResult = mesh.wait(future, f"reward worker {i}: score", self.timeout_s)
            merged.rewards += part.rewards
            merged.breakdown += part.breakdown
            merged.errors += [f"[samples {lo}-{hi - 1}] {e}" for e in part.errors]
            for name, value in part.metrics.items():
                sums[name] = sums.get(name, 0.0) + (value if name == "reward/errors" else value * (hi - lo))
        merged.metrics = {name: (v if name == "reward/errors" else v / max(n, 1)) for name, v in sums.items()}
        return merged

    def close(self) -> None:
        self.local.close()
