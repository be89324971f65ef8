"""Worker processes that run reward calls and are killed when a call overruns (``RewardRunner(isolation="process")``).

Threads cannot be stopped, and a call stuck in C code holding the GIL (a huge integer power) stalls every thread
of the process, including the one watching the time. A process can always be killed: the parent waits on the
workers' pipes (no GIL held), and a call still running ``timeout_s`` after it started gets its worker killed
(SIGKILL) and replaced. Workers are forked (POSIX) once per pool and on each replacement: they start at once,
inherit the reward functions (no pickling, lambdas work) and never re-run the user's ``__main__``, so a plain
script without an ``if __name__ == "__main__"`` guard works. Where ``fork`` is unavailable ``spawn`` is used
and the reward functions must be picklable.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from rlforge.errors import ConfigError
from rlforge.rewards._workers import TIMED_OUT

__all__ = ["ProcessPool"]

_PENDING = object()
Call = tuple[int, str, str, str]  # (reward index, prompt, response, target)


def _serve(conn: Connection, fns: Sequence[Callable[..., Any]], score: Callable[..., Any]) -> None:
    """Worker loop: ``(k, reward index, prompt, response, target)`` in, ``(k, score(...))`` out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it kills us
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        k, r, prompt, response, target = job
        conn.send((k, score(fns[r], prompt, response, target)))


class _Worker:
    def __init__(self, ctx: Any, fns: Sequence[Callable[..., Any]], score: Callable[..., Any]) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, fns, score), name="rlforge-reward-worker", daemon=True)
        try:
            self.process.start()
        except Exception as err:  # pickling the reward functions fails here (spawn/forkserver)
            raise ConfigError(
                f"RewardRunner(isolation='process') could not start a worker ({type(err).__name__}: {err}); "
                "reward functions must be picklable (module-level functions or class instances, not lambdas)"
            ) from err
        child.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class ProcessPool:
    """``num_workers`` processes scoring reward calls, each call limited to ``timeout_s`` by a hard kill.

    Args:
        fns: The reward functions (picklable unless started by ``fork``).
        score: ``score(fn, prompt, response, target)``, run in the worker; its result is sent back.
        num_workers: Processes kept busy at once.
        start_method: ``fork`` (default where available), ``forkserver`` or ``spawn``.
    """

    def __init__(
        self,
        fns: Sequence[Callable[..., Any]],
        score: Callable[..., Any],
        num_workers: int,
        start_method: str | None = None,
    ) -> None:
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context(start_method or ("fork" if "fork" in methods else "spawn"))
        self._fns, self._score, self.num_workers = list(fns), score, num_workers
        self._idle: list[_Worker] = []

    def run(
        self, calls: Sequence[Call], timeout_s: float, on_result: Callable[[int, object], bool]
    ) -> tuple[list[object], bool]:
        """Scores every call; same contract as :meth:`~rlforge.rewards._workers.TimedPool.run`.

        A result is the score function's return value or :data:`~rlforge.rewards._workers.TIMED_OUT`; a worker
        that dies mid-call gives a one-line ``RuntimeError`` description.
        """
        results: list[object] = [_PENDING] * len(calls)
        pending = deque(enumerate(calls))
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        cancelled = False

        def record(k: int, value: object) -> None:
            nonlocal cancelled
            results[k] = value
            cancelled = on_result(k, value) or cancelled

        try:
            while (pending or busy) and not cancelled:
                while pending and len(busy) < self.num_workers:
                    worker = self._idle.pop() if self._idle else _Worker(self._ctx, self._fns, self._score)
                    k, call = pending.popleft()
                    worker.conn.send((k, *call))
                    busy[worker.conn] = (worker, k, time.monotonic())
                due = min(started for _, _, started in busy.values()) + timeout_s
                for conn in wait(list(busy), timeout=max(0.0, due - time.monotonic())):
                    worker, k, _ = busy.pop(conn)
                    try:
                        _, value = conn.recv()
                    except (EOFError, OSError):
                        worker.kill()
                        value = f"RuntimeError: reward worker process died (exit code {worker.process.exitcode})"
                    else:
                        self._idle.append(worker)
                    record(k, value)
                now = time.monotonic()
                for conn, (worker, k, started) in list(busy.items()):
                    if now >= started + timeout_s:
                        del busy[conn]
                        worker.kill()
                        record(k, TIMED_OUT)
        finally:
            for worker, _, _ in busy.values():  # cancelled or interrupted: their answers are not wanted
                worker.kill()
        return [None if r is _PENDING else r for r in results], cancelled

    @property
    def abandoned_alive(self) -> int:
        """Always 0: an overdue call's process is killed, nothing keeps running in the background."""
        return 0

    def close(self) -> None:
        """Stops the idle workers."""
        for worker in self._idle:
            try:
                worker.conn.send(None)
            except OSError:
                pass
            worker.process.join(timeout=1)
            if worker.process.is_alive():
                worker.process.kill()
            worker.conn.close()
        self._idle.clear()
