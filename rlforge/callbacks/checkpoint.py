"""``ModelCheckpoint``: periodic, atomic, resumable checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlforge.callbacks.callback import Callback
from rlforge.checkpoint_io import atomic_write_json
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge

LAST_POINTER = "last.json"


class ModelCheckpoint(Callback):
    """Saves ``step-NNNNNN/`` folders (HF policy folder + full trainer state) and a ``last.json`` pointer.

    Every write goes to a temp folder renamed into place, so a crash never leaves a half checkpoint
    and ``ckpt_path="last"`` always resumes from a complete one.

    Args:
        dirpath: Folder of the checkpoints (default ``<default_root_dir>/checkpoints``).
        every_n_steps: Save every N RL steps (0 disables periodic saves).
        save_last: Also save after the last step.
        save_top_k: Keep this many checkpoints (-1 keeps all); with ``monitor``, the best ones, else the newest.
        monitor: Metric that ranks checkpoints (e.g. ``val/accuracy``).
        mode: ``max`` or ``min`` for ``monitor``.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        every_n_steps: int = 50,
        save_last: bool = True,
        save_top_k: int = -1,
        monitor: str | None = None,
        mode: str = "max",
    ) -> None:
        if mode not in ("max", "min"):
            raise ConfigError(f"ModelCheckpoint.mode must be 'max' or 'min', got {mode!r}")
        if every_n_steps < 0:
            raise ConfigError(f"ModelCheckpoint.every_n_steps must be >= 0, got {every_n_steps}")
        self.dirpath, self.every_n_steps, self.save_last = dirpath, every_n_steps, save_last
        self.save_top_k, self.monitor, self.mode = save_top_k, monitor, mode
        self.saved: list[dict[str, Any]] = []  # {"path", "step", "score"}

    def resolve_dirpath(self, trainer: rlforge.RLTrainer) -> Path:
        return Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "checkpoints"

    def last_checkpoint_path(self, trainer: rlforge.RLTrainer) -> Path | None:
        """The checkpoint ``last.json`` points to, if it exists."""
        pointer = self.resolve_dirpath(trainer) / LAST_POINTER
        if not pointer.is_file():
            return None
        path = self.resolve_dirpath(trainer) / json.loads(pointer.read_text())["name"]
        return path if path.is_dir() else None

    def should_save(self, trainer: rlforge.RLTrainer) -> bool:
        """Asked by the trainer after every step's hooks: periodic saves, and the final one with ``save_last``."""
        periodic = bool(self.every_n_steps) and trainer.global_step % self.every_n_steps == 0
        final = self.save_last and (trainer.global_step >= trainer.max_steps or trainer.should_stop)
        return periodic or final

    def save(self, trainer: rlforge.RLTrainer) -> Path:
        """Writes a checkpoint of the current step and updates ``last.json`` and top-k."""
        dirpath = self.resolve_dirpath(trainer)
        name = f"step-{trainer.global_step:06d}"
        score = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        self.saved = [e for e in self.saved if e["name"] != name]
        self.saved.append({"name": name, "step": trainer.global_step, "score": score})
        path = trainer.save_checkpoint(dirpath / name)
        atomic_write_json(dirpath / LAST_POINTER, {"name": name, "step": trainer.global_step})
        self._prune(dirpath)
        return path

    def _prune(self, dirpath: Path) -> None:
        if self.save_top_k < 0 or len(self.saved) <= self.save_top_k:
            return
        newest = max(self.saved, key=lambda e: e["step"])
        if self.monitor:
            sign = 1.0 if self.mode == "max" else -1.0
            ranked = sorted(
                self.saved, key=lambda e: (e["score"] is not None, sign * (e["score"] or 0.0)), reverse=True
            )
        else:
            ranked = sorted(self.saved, key=lambda e: e["step"], reverse=True)
        keep = ranked[: self.save_top_k] + [newest]  # the newest always stays: it is what "last" resumes
        for entry in self.saved:
            if entry not in keep:
                shutil.rmtree(dirpath / entry["name"], ignore_errors=True)
        self.saved = [e for e in self.saved if e in keep]

    def state_dict(self) -> dict[str, Any]:
        return {"saved": [dict(e) for e in self.saved]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.saved = [dict(e) for e in state_dict["saved"]]
