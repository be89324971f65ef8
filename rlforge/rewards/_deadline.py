"""A time limit for pure-Python work in the current thread, without signals.

``call_with_deadline`` installs a ``sys.settrace`` hook for the current thread only; the hook sees each
new Python frame (it turns off line tracing by returning None) and raises :class:`DeadlineExceeded`
(a ``BaseException``, so library code's ``except Exception`` cannot swallow it) at the first Python
function call after the deadline. It works in any thread, unlike ``signal.alarm``; the cost is one
clock read per Python call (sympy-heavy work runs roughly 1.5-2x slower). It cannot interrupt a single
long C call (e.g. a huge integer power): bound those inputs before calling. If a tracer (debugger,
coverage) is already active in the thread the limit is not applied and ``fn`` runs unbounded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
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

    def hook(frame: object, event: str, arg: object) -> None:
        if clock() > deadline:
            raise DeadlineExceeded(f"exceeded {seconds}s")
        return None

    sys.settrace(hook)
    try:
        return fn()
    finally:
        sys.settrace(None)
