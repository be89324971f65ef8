"""``LocalEnvRunner``: the environments of live episodes, stepped concurrently in threads with a per-call time limit.

The runner is the ``EnvRunner`` service of ``LocalStrategy`` (Monarch's env actors each run one too). An
environment that raises, runs past ``timeout_s`` or returns the wrong type ends only its own episode: the
result says ``done`` with reward 0 and ``info["error"]``, and the episode loop counts it in ``env/errors``.
A hung call's thread cannot be killed in Python: it is abandoned (run slow or unsafe environments as Monarch
env actors, which are processes).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rlforge.envs.base import Environment, Observation, StepResult


def failure(message: str) -> StepResult:
    """The result of an environment call that failed: the episode ends with reward 0."""
    return StepResult(observation=None, reward=0.0, done=True, info={"error": message})


def _resolve(value: Any) -> Any:
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def _closed(env: Environment) -> StepResult:
    _resolve(env.close())
    return StepResult(done=True)


def _checked_reset(env: Environment, row: dict[str, Any], seed: int) -> StepResult:
    obs = _resolve(env.reset(row, seed))
    if isinstance(obs, str):
        obs = Observation(obs)
    if not isinstance(obs, Observation) or not isinstance(obs.text, str):
        raise TypeError(f"{type(env).__name__}.reset returned {type(obs).__name__}, expected an Observation")
    return StepResult(observation=obs)


def _checked_step(env: Environment, action: str) -> StepResult:
    result = _resolve(env.step(action))
    name = type(env).__name__
    if not isinstance(result, StepResult):
        raise TypeError(f"{name}.step returned {type(result).__name__}, expected a StepResult")
    if (
        isinstance(result.reward, bool)
        or not isinstance(result.reward, (int, float))
        or not math.isfinite(result.reward)
    ):
        raise TypeError(f"{name}.step returned reward {result.reward!r}, expected a finite number")
    if not result.done and not (
        isinstance(result.observation, Observation) and isinstance(result.observation.text, str)
    ):
        raise TypeError(f"{name}.step returned no Observation for an episode that is not done")
    return result


class LocalEnvRunner:
    """Runs one environment copy per live episode, concurrently, in this process.

    Args:
        template: The configured environment; each episode gets ``template.spawn()``.
    """

    def __init__(self, template: Environment) -> None:
        self.template = template
        self.max_turns, self.timeout_s = template.max_turns, template.timeout_s
        self._envs: dict[int, Environment] = {}
        self._lock = threading.Lock()

    def reset(self, ids: Sequence[int], rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> list[StepResult]:
        """Starts episodes ``ids``: a result whose ``observation`` is the first prompt, or a failure."""

        def start(episode: int, row: dict[str, Any], seed: int) -> StepResult:
            env = self.template.spawn()
            with self._lock:
                self._envs[episode] = env
            return _checked_reset(env, row, seed)

        calls = [(lambda e=e, r=r, s=s: start(e, r, s)) for e, r, s in zip(ids, rows, seeds, strict=True)]
        return self._run(calls, "reset")

    def step(self, ids: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Applies one model turn per episode; a failed episode is closed."""
        with self._lock:
            envs = [self._envs.get(e) for e in ids]
        calls = [
            (lambda env=env, a=a: _checked_step(env, a)) if env is not None else (lambda: failure("no such episode"))
            for env, a in zip(envs, actions, strict=True)
        ]
        return self._run(calls, "step")

    def close(self, ids: Sequence[int]) -> None:
        """Ends episodes ``ids``: their ``close`` calls run concurrently within ``timeout_s``; errors are ignored."""
        with self._lock:
            envs = [self._envs.pop(e) for e in ids if e in self._envs]
        self._run([(lambda env=env: _closed(env)) for env in envs], "close")

    def shutdown(self) -> None:
        """Closes every open episode."""
        self.close(list(self._envs))

    def _run(self, calls: list[Callable[[], StepResult]], what: str) -> list[StepResult]:
        """Runs ``calls`` concurrently, each in its own daemon thread, each within ``timeout_s``.

        Daemon threads, not a pool: a hung environment must neither hold a worker forever nor block the
        interpreter's exit.
        """
        results: list[StepResult | None] = [None] * len(calls)

        def run(i: int, call: Callable[[], StepResult]) -> None:
            begin = time.monotonic()
            try:
                result = call()
                result.info.setdefault("seconds", time.monotonic() - begin)
            except Exception as err:  # noqa: BLE001 - an environment's own bug ends its episode, not the run
                result = failure(f"{what} raised {type(err).__name__}: {err}")
            results[i] = result

        threads = [
            threading.Thread(target=run, args=(i, c), daemon=True, name="rlforge-env") for i, c in enumerate(calls)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        late = f"{what} took longer than timeout_s={self.timeout_s:g}"
        return [r if r is not None else failure(late) for r in results]
