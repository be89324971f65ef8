"""Strategies: where the policy, generator, reference model and reward workers run."""

from rlforge.strategies.base import Strategy
from rlforge.strategies.local import LocalStrategy

__all__ = ["LocalStrategy", "Strategy"]
