"""``call_with_deadline``: the time limit fires in the guarded call, never inside a garbage collection's callbacks
or a ``__del__`` (where the exception would be swallowed and the limit lifted)."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest

from rlforge.rewards._deadline import DeadlineExceeded, call_with_deadline


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _noop()


def _noop() -> None:
    pass


def test_a_long_call_is_cut_at_its_deadline():
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="exceeded 0.05s"):
        call_with_deadline(lambda: _spin(5.0), 0.05)
    assert time.monotonic() - start < 1.0
    assert call_with_deadline(lambda: 7, 1.0) == 7
    assert sys.gettrace() is None  # the hook is gone afterwards


def test_a_gc_callback_that_outlives_the_deadline_runs_to_its_end(monkeypatch):
    """A collection during the guarded call runs every gc callback in full (hypothesis, for one, registers one).

    Before the fix the hook raised inside the callback: gc swallowed it as "Exception ignored in ..." (an
    unraisable exception) and the callback stopped half way.
    """
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    phases: list[str] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            time.sleep(0.1)  # the guarded call's deadline passes in here
        _noop()  # a Python call after the deadline
        phases.append(phase)

    callbacks_before = list(gc.callbacks)
    gc.callbacks.append(callback)
    try:

        def guarded() -> None:
            gc.collect()
            _noop()  # the guarded call's own next call is where the limit fires

        with pytest.raises(DeadlineExceeded):
            call_with_deadline(guarded, 0.02)
    finally:
        gc.callbacks.remove(callback)
    assert phases == ["start", "stop"]
    assert unraisable == []
    assert gc.callbacks == callbacks_before  # the deadline's own markers are removed


def test_threads_with_deadlines_leave_each_other_and_gc_alone():
    """Reward workers run guarded calls in several threads at once; each limit fires in its own thread only."""
    results: dict[str, object] = {}

    def worker(name: str, work_s: float, limit_s: float) -> None:
        try:
            call_with_deadline(lambda: (_spin(work_s), gc.collect()), limit_s)
            results[name] = "done"
        except DeadlineExceeded:
            results[name] = "timed out"

    threads = [
        threading.Thread(target=worker, args=("short", 0.05, 5.0)),
        threading.Thread(target=worker, args=("long", 5.0, 0.1)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == {"short": "done", "long": "timed out"}
    assert not any(getattr(cb, "__name__", "").startswith("collection_") for cb in gc.callbacks)


def test_a_finalizer_that_outlives_the_deadline_runs_to_its_end_and_the_limit_holds(monkeypatch):
    """Before the fix the hook raised inside ``__del__``: the exception was swallowed and, as CPython unsets a
    trace function that raised, the guarded call then ran with no limit at all."""
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    finalized: list[bool] = []

    class Slow:
        def __del__(self) -> None:
            time.sleep(0.1)  # the deadline passes in here
            _noop()
            finalized.append(True)

    def guarded() -> None:
        obj = Slow()
        del obj  # refcount 0: __del__ runs here, in the guarded call's thread
        _spin(5.0)  # must still be cut at the limit

    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        call_with_deadline(guarded, 0.02)
    assert time.monotonic() - start < 2.0
    assert finalized == [True]
    assert unraisable == []
