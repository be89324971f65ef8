"""Where each step's training batch comes from: rollouts (``RolloutEngine``) or fixed targets (SFT)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rlforge.parallel.shard import check_divisible, rank_slice
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


def batch_source(services: Services, datamodule: Any, module: RLModule, ctx: RunContext) -> BatchSource:
    """``SupervisedBatches`` for a supervised module (``module.supervised``), else a ``RolloutEngine``."""
    if module.supervised:
        return SupervisedBatches(datamodule, module, ctx)
    return RolloutEngine(services, datamodule, module, ctx)
