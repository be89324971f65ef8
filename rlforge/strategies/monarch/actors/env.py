"""``EnvActor``: the environments of a shard of live episodes, in their own process."""

from __future__ import annotations

from typing import Any

from monarch.actor import Actor, endpoint

from rlforge.envs.base import Environment, StepResult
from rlforge.envs.runner import LocalEnvRunner


class EnvActor(Actor):
    """Runs a ``LocalEnvRunner`` (same per-call ``timeout_s``; a raise or timeout ends only its episode).

    Args:
        template: The module's configured environment; it reaches this process pickled (Monarch pickles spawn
            arguments with cloudpickle), so it must pickle: a class importable here, or defined in ``__main__``.
    """

    def __init__(self, template: Environment) -> None:
        self.runner = LocalEnvRunner(template)

    @endpoint
    def reset(self, ids: list[int], rows: list[dict[str, Any]], seeds: list[int]) -> list[StepResult]:
        return self.runner.reset(ids, rows, seeds)

    @endpoint
    def step(self, ids: list[int], actions: list[str]) -> list[StepResult]:
        return self.runner.step(ids, actions)

    @endpoint
    def close(self, ids: list[int]) -> None:
        self.runner.close(ids)

    @endpoint
    def shutdown(self) -> None:
        self.runner.shutdown()
