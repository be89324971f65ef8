"""Where each step's training batch comes from: rollouts (``RolloutEngine``) or fixed targets (SFT)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from rlforge.parallel.process_group import scatter_objects
from rlforge.parallel.shard import check_divisible, rank_slice, split_evenly
from rlforge.rollout import RolloutEngine
from rlforge.services import RunContext, Services

if TYPE_CHECKING:
    from rlforge.module import RLModule
    from rlforge.types import Group


class BatchSource(Protocol):
    """``next(step) -> (groups, batch)`` plus the state an exact resume needs."""

    def next(self, step: int) -> tuple[list[Group], Any]: ...
    def state_dict(self, policy_version: int, step_only: bool = False) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SupervisedBatches:
    """Fixed (prompt, target) batches of a supervised module: no rollouts, nothing to sync. With several ranks,
    each takes its contiguous share of every batch."""

    def __init__(self, datamodule: Any, module: RLModule, ctx: RunContext) -> None:
        self.datamodule, self.module, self.ctx = datamodule, module, ctx
        check_divisible(datamodule.batch_size, ctx.world_size, "data.batch_size")

    def next(self, step: int) -> tuple[list[Group], Any]:
        rows = rank_slice(self.datamodule.next_batch(), self.ctx.rank, self.ctx.world_size)
        return [], self.module.collate(rows).to(self.ctx.device)

    def state_dict(self, policy_version: int, step_only: bool = False) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the datamodule holds the position."""


class ScatteredRollouts:
    """Rank 0 samples, scores and references the whole step on its services (one set of Monarch actors for the
    run); each rank receives its contiguous share of whole groups and collates and corrects it itself.

    Args:
        engine: A ``RolloutEngine`` with a one-process view of the step (every rank builds one; only rank 0's
            samples).
        rank: This rank.
        world_size: Number of data-parallel ranks.
    """

    def __init__(self, engine: RolloutEngine, rank: int, world_size: int) -> None:
        self.engine, self.rank, self.world_size = engine, rank, world_size

    def next(self, step: int) -> tuple[list[Group], Any]:
        shares = None
        if self.rank == 0:
            groups = self.engine.groups(step)
            self.engine.attach_reference(groups)
            shares = split_evenly(groups, self.world_size)  # async rollouts may have dropped stale groups
        mine = scatter_objects(shares)
        return mine, self.engine.train_batch(mine, step)

    def state_dict(self, policy_version: int, step_only: bool = False) -> dict[str, Any]:
        return self.engine.state_dict(policy_version, step_only) if self.rank == 0 else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        services = self.engine.services
        weights = services.full_weights() if services.full_weights is not None else None  # a gather: every rank
        if self.rank == 0:
            self.engine.load_state_dict(state, weights)


def batch_source(services: Services, datamodule: Any, module: RLModule, ctx: RunContext) -> BatchSource:
    """``SupervisedBatches`` for a supervised module (``module.supervised``); ``ScatteredRollouts`` when the
    services sample for every rank (``services.rank0_samples``); else a ``RolloutEngine`` per rank."""
    if module.supervised:
        return SupervisedBatches(datamodule, module, ctx)
    if services.rank0_samples and ctx.world_size > 1:
        check_divisible(datamodule.batch_size, ctx.world_size, "data.batch_size")
        one_process = dataclasses.replace(ctx, rank=0, world_size=1)
        return ScatteredRollouts(RolloutEngine(services, datamodule, module, one_process), ctx.rank, ctx.world_size)
    return RolloutEngine(services, datamodule, module, ctx)
