"""``RemoteGenerator``: the ``Generator`` protocol over ``GeneratorActor`` replicas, with weight versions and faults.

A prompt batch is split into contiguous shards, one per replica. ``update_weights`` packs the weights into a
flat versioned buffer (``WeightPublisher``); each replica pulls it and acknowledges the version; a version is
freed once every replica acked a newer one. A replica whose process died is respawned with the newest weights
and its shard re-sent (``restart_on_failure``), else the ``WorkerDiedError`` ends the run (the trainer's
``on_exception`` path saves the last completed step).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from rlforge.errors import WorkerDiedError
from rlforge.generation import SamplingParams
from rlforge.metrics import Reduce
from rlforge.strategies.monarch import mesh
from rlforge.strategies.monarch.weights import WeightPublisher
from rlforge.types import Completion

log = logging.getLogger(__name__)


class RemoteGenerator:
    """Generator replicas on Monarch process meshes.

    Args:
        spawn: ``spawn(index) -> Replica`` starts replica ``index`` (placement is the strategy's business).
        num_replicas: Replicas to start.
        publisher: The weight buffer the replicas pull from.
        timeout_s: Time limit of every wait on a replica.
        asynchronous: Do not wait for weight acknowledgements at ``update_weights`` (async rollouts: a replica
            acks after the requests queued before the update have finished).
        restart_on_failure: Respawn a dead replica (at most ``max_restarts`` times each).
        max_restarts: Restarts allowed per replica.
        log_metric: Metric sink ``(name, value, reduce)``.
    """

    def __init__(
        self,
        spawn: Callable[[int], mesh.Replica],
        num_replicas: int,
        publisher: WeightPublisher,
        timeout_s: float,
        asynchronous: bool = False,
        restart_on_failure: bool = False,
        max_restarts: int = 3,
        log_metric: Callable[..., None] = lambda *a, **k: None,
    ) -> None:
        self._spawn, self._publisher, self.timeout_s = spawn, publisher, timeout_s
        self.asynchronous, self.restart_on_failure, self.max_restarts = asynchronous, restart_on_failure, max_restarts
        self._log = log_metric
        self.replicas: list[mesh.Replica] = [spawn(i) for i in range(num_replicas)]
        self._acks: list[tuple[int, Any]] = []
        self._versions: dict[int, int] = {}  # replica index -> acknowledged version

    # ------------------------------------------------------------------------------- weights
    @property
    def policy_version(self) -> int:
        """The oldest version any replica holds."""
        return min(self._versions.values()) if self._versions else 0

    @torch.no_grad()
    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        handle = self._publisher.publish(state_dict, version)
        for replica in self.replicas:
            self._acks.append((replica.index, replica.actor.update_weights.call_one(handle, self.timeout_s)))
        if not self.asynchronous:
            self.drain_acks()

    def drain_acks(self) -> None:
        """Waits for outstanding version acknowledgements (in order; each is behind at most one request)."""
        pulls = []
        while self._acks:
            index, future = self._acks.pop(0)
            version, pull_s = self._guard(index, future, "update_weights")
            self._versions[index] = version
            self._publisher.ack(f"generator{index}", version)
            pulls.append(pull_s)
        if pulls:
            self._log("perf/sync_pull_s", max(pulls), Reduce.MAX)

    @property
    def live_versions(self) -> list[int]:
        """Weight versions still held in the publisher (freed once every replica acked a newer one)."""
        return self._publisher.live_versions

    def weights_state_dict(self) -> dict[str, torch.Tensor]:
        """The newest published weights (what every replica holds once it acked)."""
        return {k: v.clone() for k, v in self._publisher.latest_state_dict().items()}

    # ----------------------------------------------------------------------------- sampling
    def submit(self, prompt_ids: list[list[int]], params: SamplingParams) -> _Request:
        """Sends each replica its shard now; ``result()`` collects them."""
        self.drain_acks()  # the request must see the newest published weights
        n = len(self.replicas)
        bounds = [len(prompt_ids) * i // n for i in range(n + 1)]
        shards = [
            (replica.index, lo, hi, replica.actor.generate.call_one(prompt_ids[lo:hi], params))
            for replica, lo, hi in zip(self.replicas, bounds[:-1], bounds[1:], strict=True)
            if hi > lo
        ]
        return _Request(self, prompt_ids, params, shards)

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        return self.submit(prompt_ids, params).result()

    # -------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        rng = []
        for replica in self.replicas:
            try:
                rng.append(mesh.wait(replica.actor.state_dict.call_one(), "generator: state_dict", self.timeout_s))
            except WorkerDiedError:
                rng.append(None)
        return {"replicas": rng, "policy_version": self._publisher.latest.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for replica, rng in zip(self.replicas, state.get("replicas", []), strict=False):
            if rng is not None:
                mesh.wait(replica.actor.load_state_dict.call_one(rng), "generator: load_state_dict", self.timeout_s)

    def pids(self) -> list[int]:
        """Process ids of the replicas (diagnostics and fault-injection tests)."""
        return [mesh.wait(r.actor.pid.call_one(), "generator: pid", self.timeout_s) for r in self.replicas]

    def close(self) -> None:
        for replica in self.replicas:
            mesh.stop_replica(replica)
        self.replicas = []

    # ------------------------------------------------------------------------------- faults
    def _guard(self, index: int, future: Any, what: str, retry: Callable[[], Any] | None = None) -> Any:
        """Waits on a replica call; a dead process is respawned (and ``retry`` re-sent) or the error raised."""
        while True:
            try:
                return mesh.wait(future, f"generator replica {index}: {what}", self.timeout_s)
            except WorkerDiedError:
                replica = self.replicas[index]
                if not self.restart_on_failure or replica.restarts >= self.max_restarts:
                    raise
                self.respawn(index)
                if retry is None:  # a lost weight update: the respawned replica already has the newest
                    return self._versions[index], 0.0
                future = retry()

    def respawn(self, index: int) -> None:
        """Replaces replica ``index`` by a fresh process holding the newest published weights."""
        old = self.replicas[index]
        latest = self._publisher.latest
        log.warning("generator replica %d died; respawning it with policy version %d", index, latest.version)
        mesh.stop_replica(old, timeout_s=5.0)
        self._publisher.forget(f"generator{index}")
        replica = self._spawn(index)
        replica.restarts = old.restarts + 1
        self.replicas[index] = replica
        self._acks = [(i, f) for i, f in self._acks if i != index]  # acks of the dead actor never arrive
        what = f"generator replica {index}: update_weights"
        version, _ = mesh.wait(replica.actor.update_weights.call_one(latest, self.timeout_s), what, self.timeout_s)
        self._versions[index] = version
        self._publisher.ack(f"generator{index}", version)
        self._log("rollout/restarts", 1.0, Reduce.SUM)


class _Request:
    """One submitted ``generate``: a future per replica shard."""

    def __init__(self, owner: RemoteGenerator, prompt_ids: list[list[int]], params: SamplingParams, shards) -> None:
        self.owner, self.prompt_ids, self.params, self.shards = owner, prompt_ids, params, shards

    def result(self) -> list[list[Completion]]:
        out: list[list[Completion]] = []
        for index, lo, hi, future in self.shards:

            def retry(i: int = index, lo: int = lo, hi: int = hi) -> Any:
                return self.owner.replicas[i].actor.generate.call_one(self.prompt_ids[lo:hi], self.params)

            out += self.owner._guard(index, future, "generate", retry)
        return out
