"""The logger contract: ``log_metrics``, ``log_hyperparams``, ``finalize``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any


class Logger(ABC):
    """Receives step metrics and the run configuration."""

    @property
    @abstractmethod
    def log_dir(self) -> Path:
        """Folder of this run (metrics, manifest, checkpoints live under it)."""

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Records the metrics of one step."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Records the resolved configuration."""

    def finalize(self, status: str) -> None:
        """Flushes and closes; ``status`` is ``success``, ``failed`` or ``interrupted``."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores logged history on resume."""
