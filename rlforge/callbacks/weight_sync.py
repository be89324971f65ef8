"""``WeightSync``: how often the policy's weights are pushed to the rollout generator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge


class WeightSync(Callback):
    """Sets the trainer's ``sync_interval``: weights are pushed after every ``sync_interval`` RL steps.

    Between syncs the generator samples with older weights, so rollouts are up to ``sync_interval - 1``
    versions stale (logged as ``rollout/staleness``). Equivalent to ``RLTrainer(sync_interval=k)``, which is
    where the trainer reads it; this callback remains for configs that stack it with other callbacks.

    Args:
        sync_interval: Sync after every ``sync_interval`` RL steps (>= 1).
    """

    def __init__(self, sync_interval: int = 1) -> None:
        if sync_interval < 1:
            raise ConfigError(f"WeightSync.sync_interval must be >= 1, got {sync_interval}")
        self.sync_interval = sync_interval
        self.last_synced_version = 0

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        trainer.sync_interval = self.sync_interval  # the trainer refuses a different explicit setting

    def on_weight_sync_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self.last_synced_version = trainer.policy_version

    def state_dict(self) -> dict[str, Any]:
        return {"last_synced_version": self.last_synced_version}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_synced_version = int(state_dict["last_synced_version"])
