"""``EarlyStopping``: stops the run when a monitored metric stops improving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rlforge.callbacks._report import announce
from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge


class EarlyStopping(Callback):
    """Stops after ``patience`` checks without an improvement of ``monitor`` by more than ``min_delta``.

    A check is a step that logged ``monitor`` (every step for ``rollout/*`` and ``train/*``, validation
    steps for ``val/*``).

    Example::

        >>> from rlforge import RLTrainer
        >>> trainer = RLTrainer(callbacks=[EarlyStopping(monitor="val/accuracy", mode="max", patience=3)])

    Args:
        monitor: Metric to watch.
        patience: Checks without improvement before stopping.
        mode: ``max`` (higher is better) or ``min``.
        min_delta: Smallest change that counts as an improvement.
    """

    def __init__(self, monitor: str = "val/accuracy", patience: int = 3, mode: str = "max", min_delta: float = 0.0):
        if mode not in ("max", "min"):
            raise ConfigError(f"EarlyStopping.mode must be 'max' or 'min', got {mode!r}")
        if patience < 1:
            raise ConfigError(f"EarlyStopping.patience must be >= 1, got {patience}")
        self.monitor, self.patience, self.mode, self.min_delta = monitor, patience, mode, abs(min_delta)
        self.wait_count = 0
        self.best_score = -math.inf if mode == "max" else math.inf
        self.stopped_step = 0

    @property
    def state_key(self) -> str:
        return f"EarlyStopping{{monitor={self.monitor}, mode={self.mode}}}"

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        value = metrics.get(self.monitor)
        if value is None:
            return
        improved = (
            value > self.best_score + self.min_delta if self.mode == "max" else value < self.best_score - self.min_delta
        )
        if improved:
            self.best_score, self.wait_count = value, 0
            return
        self.wait_count += 1
        if self.wait_count >= self.patience:
            trainer.should_stop = True
            self.stopped_step = trainer.global_step
            announce(
                f"rlforge: EarlyStopping: {self.monitor} did not improve on {self.best_score:.4g} for "
                f"{self.patience} checks; stopping at step {trainer.global_step}"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"wait_count": self.wait_count, "best_score": self.best_score, "stopped_step": self.stopped_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = int(state_dict["wait_count"])
        self.best_score = float(state_dict["best_score"])
        self.stopped_step = int(state_dict["stopped_step"])
