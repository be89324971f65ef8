"""``RewardRunner``: scores a rollout batch with several rewards under the failure policy.

Failure policy: a reward call that raises, runs past ``timeout_s``, or returns something that is not a
finite real number scores 0 for that reward on that sample and is counted in ``reward/errors``. If one
reward fails on more than ``max_error_frac`` of the samples of a batch, the call raises
:class:`~rlforge.errors.RewardError` (a broken reward is not hidden by healthy ones); the batch is
abandoned as soon as that is certain.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlforge.errors import ConfigError, RewardError
from rlforge.rewards._processes import ProcessPool
from rlforge.rewards._workers import TIMED_OUT, TimedPool
from rlforge.rewards.naming import unique_reward_names

__all__ = ["RewardResult", "RewardRunner"]

log = logging.getLogger(__name__)

RewardFn = Callable[[str, str, str], float]


@dataclass
class RewardResult:
    """Scores of one batch.

    Attributes:
        rewards: Weighted sum of the rewards, per sample.
        breakdown: Unweighted score of each reward (by name), per sample; a failed call counts 0.
        metrics: ``reward/errors`` (failed calls in the batch) and ``reward/<name>_mean`` per reward.
        errors: One line per failed call: ``<name> sample <i>: <ExceptionType>: <message>``.
    """

    rewards: list[float]
    breakdown: list[dict[str, float]]
    metrics: dict[str, float]
    errors: list[str] = field(default_factory=list)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(err: BaseException) -> str:
    return _one_line(f"{type(err).__name__}: {err}")


def _score(fn: RewardFn, prompt: str, response: str, target: str) -> float | str:
    """A checked score, or a one-line error description."""
    try:
        value = fn(prompt, response, target)
    except Exception as err:
        return _describe(err)
    if not isinstance(value, numbers.Real):
        return _one_line(f"TypeError: reward returned {type(value).__name__} {value!r:.60}, not a real number")
    try:
        score = float(value)
    except Exception as err:
        return _describe(err)
    if not math.isfinite(score):
        return f"ValueError: reward returned non-finite {score}"
    return score


class RewardRunner:
    """Runs reward functions on a batch with per-call time limits and an error budget.

    Calls run on ``num_workers`` daemon threads kept for the runner's lifetime (no process or thread
    spawn per batch). Time limits are per call, counted from when the call starts. Python cannot kill a
    thread: a timed-out call is abandoned and keeps running in the background until it returns (a fresh
    worker takes its place), so a reward that hangs forever leaks one thread per time-out; and a call
    stuck in C code holding the GIL cannot be interrupted at all. ``MathReward`` avoids both (it bounds
    the cost of an answer before evaluating it). Threads run in parallel only where rewards release the
    GIL (I/O, e.g. a remote judge). For rewards that may hang in C, ``isolation="process"`` runs the
    calls in ``num_workers`` worker processes instead: an overdue call's process is killed (SIGKILL) and
    replaced, so nothing keeps running; the reward functions must then be picklable.

    Reward names (for ``breakdown`` and metrics) follow
    :func:`~rlforge.rewards.naming.reward_name`: ``fn.name``, else the snake_case class name without
    ``_reward``, else the function name; repeats get ``_2``, ``_3``...

    Args:
        reward_fns: Reward callables ``(prompt, response, target) -> float``.
        weights: One weight per reward (default all 1); ``rewards`` is the weighted sum.
        timeout_s: Time limit of one call in seconds; ``None`` runs the calls inline in the caller's
            thread with no limit (and no threads).
        max_error_frac: Largest fraction of a batch's samples on which any one reward may fail.
        num_workers: Worker threads (or processes).
        isolation: ``thread`` (default) or ``process`` (hard kill of overdue calls; picklable rewards).
    """

    def __init__(
        self,
        reward_fns: Sequence[RewardFn],
        weights: Sequence[float] | None = None,
        timeout_s: float | None = 5.0,
        max_error_frac: float = 0.1,
        num_workers: int = 4,
        isolation: str = "thread",
    ) -> None:
        self.reward_fns = list(reward_fns)
        if not self.reward_fns:
            raise ConfigError("RewardRunner.reward_fns is empty; give at least one reward callable.")
        bad = [fn for fn in self.reward_fns if not callable(fn)]
        if bad:
            raise ConfigError(f"RewardRunner.reward_fns: {bad!r} is not callable.")
        if weights is None:
            weights = [1.0] * len(self.reward_fns)
        if len(weights) != len(self.reward_fns):
            raise ConfigError(
                f"RewardRunner.weights has {len(weights)} entries but reward_fns has {len(self.reward_fns)}; "
                "give one weight per reward or leave weights unset."
            )
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(f"RewardRunner.timeout_s={timeout_s}; it must be > 0 (or None for no limit).")
        if not 0.0 <= max_error_frac <= 1.0:
            raise ConfigError(f"RewardRunner.max_error_frac={max_error_frac}; it must be in [0, 1].")
        if num_workers < 1:
            raise ConfigError(f"RewardRunner.num_workers={num_workers}; it must be >= 1.")
        if isolation not in ("thread", "process"):
            raise ConfigError(f"RewardRunner.isolation={isolation!r}; choose 'thread' or 'process'.")
        self.isolation = isolation
        self.weights = [float(w) for w in weights]
        self.timeout_s = timeout_s
        self.max_error_frac = float(max_error_frac)
        self.num_workers = num_workers
        self.names = unique_reward_names(self.reward_fns)
        self._pool: TimedPool | ProcessPool | None = None
        self._pool_lock = threading.Lock()

    def _get_pool(self) -> TimedPool | ProcessPool:
        with self._pool_lock:
            if self._pool is None:
                if self.isolation == "process":
                    self._pool = ProcessPool(self.reward_fns, _score, self.num_workers)
                else:
                    self._pool = TimedPool(self.num_workers)
                weakref.finalize(self, self._pool.close)
            return self._pool

    def close(self) -> None:
        """Stop the idle workers (a later call starts new ones)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], targets: Sequence[str]) -> RewardResult:
        """Score a batch: one call of every reward per sample.

        Args:
            prompts: Prompt of each sample.
            responses: Model completion of each sample.
            targets: Reference answer of each sample.

        Raises:
            RewardError: A reward failed on more than ``max_error_frac`` of the samples.
        """
        n = len(prompts)
        if len(responses) != n or len(targets) != n:
            raise ValueError(
                f"RewardRunner: got {n} prompts, {len(responses)} responses and {len(targets)} targets; "
                "they must have the same length."
            )
        n_fns = len(self.reward_fns)
        scores = [[0.0] * n for _ in range(n_fns)]
        errors: list[list[tuple[int, str]]] = [[] for _ in range(n_fns)]
        limit = self.max_error_frac * n

        def on_result(k: int, outcome: object) -> bool:
            r, i = divmod(k, n)
            if isinstance(outcome, float):
                scores[r][i] = outcome
                return False
            if outcome is TIMED_OUT:
                outcome = f"TimeoutError: call took longer than timeout_s={self.timeout_s}"
            elif isinstance(outcome, BaseException):
                outcome = _describe(outcome)
            errors[r].append((i, str(outcome)))
            return len(errors[r]) > limit

        calls = [(fn, prompts[i], responses[i], targets[i]) for fn in self.reward_fns for i in range(n)]
        cancelled = False
        if self.timeout_s is None:
            for k, (fn, p, resp, t) in enumerate(calls):
                if on_result(k, _score(fn, p, resp, t)):
                    cancelled = True
                    break
        elif self.isolation == "process":
            jobs = [(r, prompts[i], responses[i], targets[i]) for r in range(n_fns) for i in range(n)]
            _, cancelled = self._get_pool().run(jobs, self.timeout_s, on_result)
        else:
            tasks = [lambda c=c: _score(*c) for c in calls]
            _, cancelled = self._get_pool().run(tasks, self.timeout_s, on_result)
        if cancelled or any(len(e) > limit for e in errors):
            r = next(r for r in range(n_fns) if len(errors[r]) > limit)
            count = len(errors[r])
            raise RewardError(
                f"reward {self.names[r]!r} failed on {'at least ' if cancelled else ''}{count} of {n} samples "
                f"({count / n:.1%} > max_error_frac={self.max_error_frac}); first error: {errors[r][0][1]}"
            )
        return self._result(n, scores, errors)

    def _result(self, n: int, scores: list[list[float]], errors: list[list[tuple[int, str]]]) -> RewardResult:
        rewards = [sum(w * s[i] for w, s in zip(self.weights, scores, strict=True)) for i in range(n)]
        breakdown = [{name: s[i] for name, s in zip(self.names, scores, strict=True)} for i in range(n)]
        lines = [f"{self.names[r]} sample {i}: {msg}" for r in range(len(errors)) for i, msg in errors[r]]
        metrics = {"reward/errors": float(len(lines))}
        for name, s in zip(self.names, scores, strict=True):
            metrics[f"reward/{name}_mean"] = sum(s) / n if n else 0.0
        if lines:
            stuck = self._pool.abandoned_alive if self._pool is not None else 0
            log.warning(
                "%d reward call(s) failed in this batch (scored 0); first: %s%s",
                len(lines),
                lines[0],
                f"; {stuck} timed-out call(s) still running in background threads" if stuck else "",
            )
        return RewardResult(rewards=rewards, breakdown=breakdown, metrics=metrics, errors=lines)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_pool"] = None
        state.pop("_pool_lock", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        state.setdefault("isolation", "thread")  # pickled before process isolation existed
        self.__dict__.update(state)
        self._pool_lock = threading.Lock()
