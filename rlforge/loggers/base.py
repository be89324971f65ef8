"""The logger contract: ``log_metrics``, ``log_hyperparams``, ``finalize`` (plus optional tables and checkpoints)."""

from __future__ import annotations

import re
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
        """Records the metrics of one step (called again with the same ``step`` to add metrics to it)."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Records the resolved configuration."""

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """Records a table (e.g. ``SampleLogger``'s samples); loggers without tables ignore it."""

    def after_save_checkpoint(self, path: Path, step: int) -> None:
        """Called after ``ModelCheckpoint`` wrote ``path`` (e.g. to upload it as an artifact)."""

    def finalize(self, status: str) -> None:
        """Flushes and closes; ``status`` is ``success``, ``failed`` or ``interrupted``."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores logged history on resume."""


class FolderLogger(Logger):
    """A logger that writes into a run folder fixed by ``bind`` (called by the trainer before any logging)."""

    _log_dir: Path | None = None

    def run_folder(self, default_root_dir: str) -> Path:
        """Where this run's folder goes, given the trainer's ``default_root_dir``."""
        raise NotImplementedError

    def bind(self, default_root_dir: str) -> None:
        """Fixes (and creates) the run folder; later calls keep the first one."""
        if self._log_dir is None:
            self._log_dir = self.run_folder(default_root_dir)
            self._log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def log_dir(self) -> Path:
        if self._log_dir is None:
            raise RuntimeError(f"{type(self).__name__}.log_dir is known once the trainer has bound the logger")
        return self._log_dir


def version_dir(root: Path, version: int | str | None) -> Path:
    """``root/version_<n>`` (the next free ``n`` when ``version`` is ``None``) or ``root/<version>`` for a string."""
    if version is None:
        taken = [int(m.group(1)) for p in root.glob("version_*") if (m := re.fullmatch(r"version_(\d+)", p.name))]
        version = max(taken, default=-1) + 1
    return root / (version if isinstance(version, str) else f"version_{version}")
