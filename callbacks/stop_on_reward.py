"""``StopOnReward``: end training once the rollout reward has stayed above a threshold."""

from __future__ import annotations

from typing import Any

from rlforge import Callback


class StopOnReward(Callback):
    """Stops the run after ``patience`` consecutive steps with ``rollout/reward_mean >= threshold``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: callbacks.stop_on_reward.StopOnReward
              init_args: {threshold: 0.9, patience: 3}

    Args:
        threshold: Mean rollout reward that counts as solved.
        patience: Consecutive steps at or above ``threshold`` before stopping.
    """

    def __init__(self, threshold: float = 0.9, patience: int = 3) -> None:
        self.threshold, self.patience = threshold, patience
        self.streak = 0

    def on_train_step_end(self, trainer, module, metrics: dict[str, float]) -> None:
        reward = metrics.get("rollout/reward_mean")
        self.streak = self.streak + 1 if reward is not None and reward >= self.threshold else 0
        if self.streak >= self.patience:
            trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {"streak": self.streak}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.streak = int(state_dict["streak"])
