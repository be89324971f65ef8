"""``RemoteEnvRunner``: the ``EnvRunner`` protocol over ``EnvActor``s (``MonarchStrategy(env=...)``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rlforge.envs.base import StepResult
from rlforge.errors import WorkerError
from rlforge.strategies.monarch import mesh

log = logging.getLogger(__name__)


class RemoteEnvRunner:
    """Shards live episodes over env actors by episode id (episode ``e`` lives on worker ``e % n``).

    Every call goes to all workers holding one of its episodes at once and the results come back in the caller's
    order. An environment that raises or runs past its ``timeout_s`` ends only its episode (the worker's
    ``LocalEnvRunner`` says so in the result); a worker process that dies stops the run with ``WorkerDiedError``.

    Args:
        workers: Single-actor meshes of ``EnvActor``.
        max_turns: The environment template's ``max_turns``.
        timeout_s: The environment template's ``timeout_s`` (each worker answers within it).
        wait_s: Time limit of every wait on a worker (``trainer.strategy.timeout_s``).
    """

    def __init__(self, workers: Sequence[Any], max_turns: int, timeout_s: float, wait_s: float) -> None:
        self.workers, self.max_turns, self.timeout_s, self.wait_s = list(workers), max_turns, timeout_s, wait_s

    def reset(self, ids: Sequence[int], rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> list[StepResult]:
        """Starts episodes ``ids`` on their workers; one result per episode, in order."""
        return self._call("reset", ids, rows, seeds)

    def step(self, ids: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Applies one model turn per episode on the episode's worker."""
        return self._call("step", ids, actions)

    def close(self, ids: Sequence[int]) -> None:
        """Ends episodes ``ids`` (each worker closes its own)."""
        self._call("close", ids)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Closes every open episode on every worker (best effort: teardown after a failure must not raise)."""
        futures = [(i, w.shutdown.call_one()) for i, w in enumerate(self.workers)]
        for i, future in futures:
            try:
                mesh.wait(future, f"env worker {i}: shutdown", timeout_s)
            except WorkerError as err:  # dead or hung: its process is stopped next anyway
                log.debug("env worker %d: shutdown: %s", i, err)

    def _call(self, what: str, ids: Sequence[int], *columns: Sequence[Any]) -> list[Any]:
        """Calls endpoint ``what`` on each worker with its episodes' ``ids`` and ``columns`` (one value per
        episode), all at once; returns the per-episode answers in the order of ``ids`` (``close``: ``None``s)."""
        n = len(self.workers)
        shards: dict[int, list[int]] = {}
        for position, episode in enumerate(ids):
            shards.setdefault(episode % n, []).append(position)
        calls = []
        for w, positions in shards.items():
            shard_args = ([column[p] for p in positions] for column in (ids, *columns))
            calls.append((w, positions, getattr(self.workers[w], what).call_one(*shard_args)))
        results: list[Any] = [None] * len(ids)
        for w, positions, future in calls:
            answer = mesh.wait(future, f"env worker {w}: {what}", self.wait_s)
            if answer is not None:
                for position, result in zip(positions, answer, strict=True):
                    results[position] = result
        return results
