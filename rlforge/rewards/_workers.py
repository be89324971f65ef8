"""Daemon worker threads that run calls with a per-call time limit (the machinery of ``RewardRunner``).

A call that overruns its limit is given up on: its result slot is filled with :data:`TIMED_OUT`, its
worker is retired and a fresh one takes its place, so the batch finishes about ``timeout_s`` after
the slow call started. Python cannot kill a thread, so the stuck call keeps running in the background
until it returns (then its thread exits); the threads are daemons, so they never block interpreter
exit. A call stuck in C code that holds the GIL (e.g. a huge integer power) also stalls the thread
that watches the time limits; rewards must bound such work themselves (``MathReward`` does) or run
in killable processes (``RewardRunner(isolation="process")``, see ``_processes.py``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

__all__ = ["TIMED_OUT", "TimedPool"]

TIMED_OUT = object()
_PENDING = object()


class _Batch:
    """Result slots of one ``run`` call; ``finish`` fills each slot once (first writer wins)."""

    def __init__(self, n: int, timeout_s: float, on_result: Callable[[int, object], bool]) -> None:
        self.timeout_s = timeout_s
        self.results: list[object] = [_PENDING] * n
        self.remaining = n
        self.cancelled = False
        self.done = threading.Event()
        self._on_result = on_result
        self._lock = threading.Lock()

    def finish(self, i: int, value: object) -> bool:
        with self._lock:
            if self.results[i] is not _PENDING or self.cancelled:
                return False
            self.results[i] = value
            self.remaining -= 1
            if self._on_result(i, value):
                self.cancelled = True
            if self.remaining == 0 or self.cancelled:
                self.done.set()
        return True


class _Worker(threading.Thread):
    def __init__(self, jobs: queue.SimpleQueue) -> None:
        super().__init__(name="rlforge-reward-worker", daemon=True)
        self.jobs = jobs
        self.current: tuple[_Batch, int, float] | None = None
        self.retired = False

    def run(self) -> None:
        while not self.retired:
            job = self.jobs.get()
            if job is None:
                return
            batch, i, fn = job
            if batch.cancelled:
                continue
            self.current = (batch, i, time.monotonic())
            try:
                value = fn()
            except BaseException as err:  # a task must not kill its worker
                value = err
            self.current = None
            batch.finish(i, value)


class TimedPool:
    """A fixed number of daemon threads running zero-argument calls, each limited to ``timeout_s``.

    Args:
        num_workers: Threads kept busy at once.
    """

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._abandoned: list[_Worker] = []

    def _start_worker(self) -> None:
        worker = _Worker(self._jobs)
        worker.start()
        self._workers.append(worker)

    def run(
        self, calls: Sequence[Callable[[], object]], timeout_s: float, on_result: Callable[[int, object], bool]
    ) -> tuple[list[object], bool]:
        """Run all calls; returns their results in order and whether the batch was cancelled.

        A result is the call's return value, the exception it raised, or :data:`TIMED_OUT`.
        ``on_result(i, result)`` is called once per finished call (under a lock, from any thread);
        returning True cancels the rest of the batch, whose slots are then left unfilled.

        Args:
            calls: Zero-argument callables.
            timeout_s: Time limit of each call, counted from when a worker starts it.
            on_result: Bookkeeping hook; True cancels the batch.
        """
        batch = _Batch(len(calls), timeout_s, on_result)
        if not calls:
            return [], False
        self._reap_overdue(time.monotonic())  # replace workers stuck in calls of earlier, abandoned batches
        with self._lock:
            while len(self._workers) < self.num_workers:
                self._start_worker()
        for i, fn in enumerate(calls):
            self._jobs.put((batch, i, fn))
        while not batch.done.is_set():
            wake = self._reap_overdue(time.monotonic() + timeout_s)
            batch.done.wait(max(0.001, wake - time.monotonic()))
        return [None if r is _PENDING else r for r in batch.results], batch.cancelled

    def _reap_overdue(self, wake: float) -> float:
        """Time out every overdue call (of any batch, also one abandoned by an earlier error) and
        replace its worker; returns when the next running call falls due (at most ``wake``)."""
        now = time.monotonic()
        with self._lock:
            for worker in list(self._workers):
                current = worker.current
                if current is None:
                    continue
                batch, i, started = current
                due = started + batch.timeout_s
                if now < due:
                    wake = min(wake, due)
                    continue
                batch.finish(i, TIMED_OUT)  # no-op if the call just finished or its batch was cancelled
                if worker.current is current:
                    worker.retired = True
                    self._workers.remove(worker)
                    self._abandoned.append(worker)
                    self._start_worker()
            self._abandoned = [w for w in self._abandoned if w.is_alive()]
        return wake

    @property
    def abandoned_alive(self) -> int:
        """Timed-out calls whose threads are still running in the background."""
        with self._lock:
            self._abandoned = [w for w in self._abandoned if w.is_alive()]
            return len(self._abandoned)

    def close(self) -> None:
        """Ask idle workers to exit (stuck ones exit when their call returns)."""
        with self._lock:
            for _ in self._workers:
                self._jobs.put(None)
            self._workers.clear()
