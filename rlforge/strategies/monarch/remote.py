"""Actor-backed ``Scorer`` and ``Reference``: ``RemoteRewardRunner`` (shards on ``RewardActor``s) and
``RemoteReference`` (the ``ReferenceActor``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlforge.metrics import Reduce, reduction_of
from rlforge.rewards import RewardResult, RewardRunner
from rlforge.strategies.monarch import mesh
from rlforge.strategies.monarch.weights import WeightPublisher
from rlforge.types import TrainBatch


class RemoteRewardRunner:
    """Splits a batch into contiguous shards, one per worker, and merges the results in order.

    Counts (metrics whose reduction is ``sum``, e.g. ``reward/errors``) are summed; every other metric
    (``reward/<name>_mean``) is the shard-size-weighted mean.
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
                sums[name] = sums.get(name, 0.0) + (value if _summed(name) else value * (hi - lo))
        merged.metrics = {name: (v if _summed(name) else v / max(n, 1)) for name, v in sums.items()}
        return merged

    def close(self) -> None:
        self.local.close()


def _summed(name: str) -> bool:
    return reduction_of(name) == Reduce.SUM


class RemoteReference:
    """The ``Reference`` protocol over one ``ReferenceActor`` holding the initial policy weights.

    Args:
        replica: The spawned reference replica.
        weights: The initial weights (kept here for checkpoints: the reference never changes).
        transport: Weight transport (``rdma`` or ``message``).
        timeout_s: Time limit of every wait.
    """

    def __init__(self, replica: mesh.Replica, weights: dict[str, torch.Tensor], transport: str, timeout_s: float):
        self.replica, self.transport, self.timeout_s = replica, transport, timeout_s
        self.load_weights(weights)

    def logprobs(self, batch: TrainBatch, temperature: float) -> torch.Tensor:
        future = self.replica.actor.logprobs.call_one(
            batch.input_ids.cpu(), batch.attention_mask.cpu(), batch.prompt_len, temperature
        )
        return mesh.wait(future, "reference: logprobs", self.timeout_s).to(batch.input_ids.device)

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self._weights = {k: v.detach().to("cpu", copy=True) for k, v in state_dict.items()}
        publisher = WeightPublisher(self.transport)
        try:
            handle = publisher.publish(self._weights, -1)
            future = self.replica.actor.load_weights.call_one(handle, self.timeout_s)
            mesh.wait(future, "reference: load_weights", self.timeout_s)
        finally:
            publisher.close()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._weights
