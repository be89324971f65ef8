"""A time limit for pure-Python work in the current thread, without signals.

``call_with_deadline`` installs a ``sys.settrace`` hook for the current thread only; the hook sees each
new Python frame (it turns off line tracing by returning None) and raises :class:`DeadlineExceeded`
(a ``BaseException``, so library code's ``except Exception`` cannot swallow it) at the first Python
function call after the deadline. It works in any thread, unlike ``signal.alarm``; the cost is one
clock read per Python call (sympy-heavy work runs roughly 1.5-2x slower). It cannot interrupt a single
long C call (e.g. a huge integer power): bound those inputs before calling. If a tracer (debugger,
coverage) is already active in the thread the limit is not applied and ``fn`` runs unbounded.

Finalizers (``__del__``) and a garbage collection's ``gc.callbacks`` that run during ``fn`` are not ``fn``'s
work. An exception raised in them is swallowed ("Exception ignored in ..."), which cuts them short, and CPython
unsets a trace function that raised, so the limit would be gone for the rest of ``fn``. The hook therefore stays
quiet inside a ``__del__`` (and what it calls) and while a collection runs, and raises at ``fn``'s next call
after it. A weakref callback that runs exactly as the limit passes is the case left: it still swallows the
exception and lifts the limit.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

__all__ = ["DeadlineExceeded", "call_with_deadline"]

T = TypeVar("T")


class DeadlineExceeded(BaseException):
    """Raised inside the guarded call when its time limit has passed."""


def call_with_deadline(fn: Callable[[], T], seconds: float) -> T:
    """Run ``fn()``; raise :class:`DeadlineExceeded` if it is still running after ``seconds``.

    Args:
        fn: Zero-argument callable doing pure-Python work.
        seconds: Time limit.
    """
    if sys.gettrace() is not None:
        return fn()
    deadline = time.monotonic() + seconds
    clock = time.monotonic
    collecting = False

    # First and last of gc's callbacks, so every other callback (and each finalizer) runs while `collecting`.
    def collection_starts(phase: str, info: dict) -> None:
        nonlocal collecting
        if phase == "start":
            collecting = True

    def collection_ends(phase: str, info: dict) -> None:
        nonlocal collecting
        if phase == "stop":
            collecting = False

    # Code objects, shared by every call's closures: another thread's markers are never interrupted either.
    markers = {collection_starts.__code__, collection_ends.__code__}

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if clock() > deadline and not collecting and not _in_finalizer(frame, markers):
            raise DeadlineExceeded(f"exceeded {seconds}s")
        return None

    gc.callbacks.insert(0, collection_starts)
    gc.callbacks.append(collection_ends)
    sys.settrace(hook)
    try:
        return fn()
    finally:
        sys.settrace(None)
        gc.callbacks.remove(collection_starts)
        gc.callbacks.remove(collection_ends)


def _in_finalizer(frame: FrameType | None, markers: set) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` or a deadline's gc marker (walked once the limit has passed)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code in markers:
            return True
        frame = frame.f_back
    return False
