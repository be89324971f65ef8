"""``TruncationAlarm``: notice when responses keep hitting ``max_new_tokens`` (runaway length)."""

from __future__ import annotations

import logging
from typing import Any

from rlforge import Callback

log = logging.getLogger("rlforge")


class TruncationAlarm(Callback):
    """Warns (or stops) after ``patience`` consecutive steps with ``rollout/truncated_frac > max_truncated_frac``.

    A policy whose answers are cut off by ``max_new_tokens`` step after step learns from truncated text:
    raise ``module.sampling.max_new_tokens``, add a length penalty or ``module.overlong_cache_len``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: callbacks.truncation_alarm.TruncationAlarm
              init_args: {max_truncated_frac: 0.5, patience: 5, stop: false}

    Args:
        max_truncated_frac: Fraction of truncated responses tolerated in a step.
        patience: Consecutive steps above it before acting.
        stop: Stop the run instead of only warning.
    """

    def __init__(self, max_truncated_frac: float = 0.5, patience: int = 5, stop: bool = False) -> None:
        self.max_truncated_frac, self.patience, self.stop = max_truncated_frac, patience, stop
        self.streak = 0
        self.alarms = 0

    def on_train_step_end(self, trainer, module, metrics: dict[str, float]) -> None:
        frac = metrics.get("rollout/truncated_frac")
        self.streak = self.streak + 1 if frac is not None and frac > self.max_truncated_frac else 0
        if self.streak < self.patience:
            return
        self.streak, self.alarms = 0, self.alarms + 1
        trainer.should_stop = trainer.should_stop or self.stop
        log.warning(
            f"rlforge: TruncationAlarm: step {trainer.global_step}: {frac:.0%} of responses hit max_new_tokens for "
            f"{self.patience} steps" + ("; stopping" if self.stop else "")
        )

    def state_dict(self) -> dict[str, Any]:
        return {"streak": self.streak, "alarms": self.alarms}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.streak, self.alarms = int(state_dict["streak"]), int(state_dict["alarms"])
