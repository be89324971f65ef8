"""Stable, log-friendly names for reward callables (used for ``reward/<name>_mean`` metrics)."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence

__all__ = ["reward_name", "unique_reward_names"]

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^0-9a-zA-Z_]+")


def _snake(name: str) -> str:
    snake = _CAMEL_BOUNDARY.sub("_", name).lower()
    return _NOT_WORD.sub("_", snake).strip("_")


def reward_name(fn: Callable[..., object]) -> str:
    """The name a reward is logged under.

    ``fn.name`` if it is a non-empty string; else, for functions, ``fn.__name__`` (``<lambda>`` becomes
    ``lambda``; a ``functools.partial`` uses the wrapped function); else the snake_case class name
    without a trailing ``_reward`` (``MathReward`` -> ``math``, ``LengthPenalty`` -> ``length_penalty``).

    Args:
        fn: A reward callable.
    """
    explicit = getattr(fn, "name", None)
    if isinstance(explicit, str) and explicit.strip():
        return explicit.strip()
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn):
        return _snake(getattr(fn, "__name__", "")) or "reward"
    snake = _snake(type(fn).__name__)
    if snake.endswith("_reward"):
        snake = snake[: -len("_reward")]
    return snake or "reward"


def unique_reward_names(fns: Sequence[Callable[..., object]]) -> list[str]:
    """Names for several rewards; repeats get ``_2``, ``_3``, ... (``math``, ``math_2``).

    Args:
        fns: The reward callables, in order.
    """
    names: list[str] = []
    seen: set[str] = set()
    for fn in fns:
        base = reward_name(fn)
        name, k = base, 1
        while name in seen:
            k += 1
            name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names
