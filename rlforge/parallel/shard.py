"""Splitting a step's prompts (whole groups) over the ranks of a data-parallel run."""

from __future__ import annotations

from typing import TypeVar

from rlforge.errors import ConfigError

T = TypeVar("T")


def check_divisible(count: int, world_size: int, field: str) -> None:
    """Raises ``ConfigError`` unless ``count`` items split evenly over ``world_size`` ranks."""
    if world_size > 1 and count % world_size:
        raise ConfigError(
            f"{field}={count} cannot be split evenly over {world_size} ranks (every rank trains on the same number "
            f"of groups): use a multiple of {world_size}"
        )


def rank_slice(items: list[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s contiguous share of ``items`` (all of them alone): rank r gets ``items[r*k:(r+1)*k]``."""
    if world_size == 1:
        return items
    size = len(items) // world_size
    return items[rank * size : (rank + 1) * size]


def split_evenly(items: list[T], parts: int) -> list[list[T]]:
    """``items`` in ``parts`` contiguous shares whose sizes differ by at most one (none is lost).

    Raises:
        ConfigError: Fewer items than parts (a rank would have nothing to train on).
    """
    if len(items) < parts:
        raise ConfigError(f"{len(items)} groups cannot be shared by {parts} ranks (async rollouts dropped too many)")
    size, extra = divmod(len(items), parts)
    bounds = [r * size + min(r, extra) for r in range(parts + 1)]
    return [items[bounds[r] : bounds[r + 1]] for r in range(parts)]
