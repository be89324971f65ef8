"""``WeightSync``: refreshes the generator's copy of the policy every ``sync_interval`` steps."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge


class WeightSync(Callback):
    """Pushes policy weights to the generator through the strategy.

    Between syncs the generator keeps sampling with older weights, so rollouts are up to
    ``sync_interval - 1`` versions stale (logged as ``rollout/staleness``). The trainer adds
    ``WeightSync(1)`` when none is configured.

    Args:
        sync_interval: Sync after every ``sync_interval`` RL steps (>= 1).
    """

    def __init__(self, sync_interval: int = 1) -> None:
        if sync_interval < 1:
            raise ConfigError(f"WeightSync.sync_interval must be >= 1, got {sync_interval}")
        self.sync_interval = sync_interval
        self.last_synced_version = 0

    def should_sync(self, trainer: rlforge.RLTrainer) -> bool:
        return trainer.global_step % self.sync_interval == 0

    def sync(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Pushes the weights now; records ``perf/sync_s`` and ``perf/sync_bytes`` (when the strategy counts them)."""
        start = time.perf_counter()
        sent = trainer.strategy.sync_weights(module, trainer.policy_version)
        self.last_synced_version = trainer.policy_version
        trainer._log_metric("perf/sync_s", time.perf_counter() - start)
        if sent is not None:
            trainer._log_metric("perf/sync_bytes", float(sent))

    def state_dict(self) -> dict[str, Any]:
        return {"last_synced_version": self.last_synced_version}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_synced_version = int(state_dict["last_synced_version"])
