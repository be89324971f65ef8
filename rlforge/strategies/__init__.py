"""Strategies: where the policy, generator, reference model and reward workers run.

``MonarchStrategy`` is imported lazily (``rlforge.strategies.MonarchStrategy``), so ``import rlforge``
never imports monarch.
"""

from __future__ import annotations

from typing import Any

from rlforge.strategies.base import Strategy
from rlforge.strategies.local import LocalStrategy
from rlforge.strategies.monarch.config import ServiceConfig

__all__ = ["LocalStrategy", "MonarchStrategy", "ServiceConfig", "Strategy"]


def __getattr__(name: str) -> Any:
    if name == "MonarchStrategy":
        from rlforge.strategies.monarch import MonarchStrategy

        return MonarchStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
