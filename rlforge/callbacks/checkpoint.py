"""``ModelCheckpoint``: periodic, atomic, resumable checkpoints, and one more when a run fails."""

from __future__ import annotations

import copy
import json
import logging
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlforge.callbacks.callback import Callback
from rlforge.checkpoint_io import atomic_write_json, capture_rng_state, is_complete_checkpoint
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge

LAST_POINTER = "last.json"
_STEP_DIR = re.compile(r"step-(\d+)")
log = logging.getLogger("rlforge")


def find_last_checkpoint(dirpath: str | Path) -> Path | None:
    """The checkpoint ``dirpath/last.json`` names; if it is missing or incomplete, the newest complete ``step-N``."""
    dirpath = Path(dirpath)
    try:
        path = dirpath / json.loads((dirpath / LAST_POINTER).read_text())["name"]
    except (OSError, ValueError, KeyError, TypeError):
        path = None
    if path is not None and is_complete_checkpoint(path):
        return path
    complete = [
        (int(m.group(1)), p)
        for p in (dirpath.iterdir() if dirpath.is_dir() else [])
        if (m := _STEP_DIR.fullmatch(p.name)) and is_complete_checkpoint(p)
    ]
    return max(complete)[1] if complete else None


class ModelCheckpoint(Callback):
    """Saves ``step-NNNNNN/`` folders (HF policy folder + full trainer state) and a ``last.json`` pointer.

    Every write goes to a temp folder renamed into place, so a crash never leaves a half checkpoint
    and ``ckpt_path="last"`` always resumes from a complete one.

    When a run fails (a non-finite stop, a reward or generator error, Ctrl-C) before the failing step has
    changed the weights, the state at the end of the last completed step is still known exactly: it is
    saved as that step's checkpoint (and becomes ``last``), so nothing is lost and the resume is exact.

    Args:
        dirpath: Folder of the checkpoints (default ``<default_root_dir>/checkpoints``).
        every_n_steps: Save every N RL steps (0 disables periodic saves).
        save_last: Also save after the last step.
        save_top_k: Keep this many checkpoints (-1 keeps all); with ``monitor``, the best ones, else the newest.
        monitor: Metric that ranks checkpoints (e.g. ``val/accuracy``).
        mode: ``max`` or ``min`` for ``monitor``.
        save_on_exception: On an error, save the last completed step if it has no checkpoint yet.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        every_n_steps: int = 50,
        save_last: bool = True,
        save_top_k: int = -1,
        monitor: str | None = None,
        mode: str = "max",
        save_on_exception: bool = True,
    ) -> None:
        if mode not in ("max", "min"):
            raise ConfigError(f"ModelCheckpoint.mode must be 'max' or 'min', got {mode!r}")
        if every_n_steps < 0:
            raise ConfigError(f"ModelCheckpoint.every_n_steps must be >= 0, got {every_n_steps}")
        self.dirpath, self.every_n_steps, self.save_last = dirpath, every_n_steps, save_last
        self.save_top_k, self.monitor, self.mode = save_top_k, monitor, mode
        self.save_on_exception = save_on_exception
        self.saved: list[dict[str, Any]] = []  # {"name", "step", "score"}
        self._boundary: dict[str, Any] | None = None  # state that changes within a step, as of its start
        self._crash_state: dict[str, Any] | None = None
        self._saving = False

    def resolve_dirpath(self, trainer: rlforge.RLTrainer) -> Path:
        return Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "checkpoints"

    def last_checkpoint_path(self, trainer: rlforge.RLTrainer) -> Path | None:
        """The checkpoint ``last.json`` points to; if that one is missing or incomplete, the newest complete one."""
        return find_last_checkpoint(self.resolve_dirpath(trainer))

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
        self._saving = True
        try:
            path = trainer.save_checkpoint(dirpath / name)
        finally:
            self._saving = False
        atomic_write_json(dirpath / LAST_POINTER, {"name": name, "step": trainer.global_step})
        self._prune(dirpath)
        for logger in trainer.loggers:
            logger.after_save_checkpoint(path, trainer.global_step)
        return path

    # ------------------------------------------------------------------------------- crash checkpoints
    def on_train_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self._capture_boundary(trainer)

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        self._capture_boundary(trainer)

    def _capture_boundary(self, trainer: rlforge.RLTrainer) -> None:
        """Records the small parts of the state that a step changes before its weights change.

        Weights, optimizer moments, scheduler, reference and stale generator weights stay as they are
        until the first optimizer step, so only these are needed to rebuild the step-boundary state.
        """
        if not self.save_on_exception:
            return
        self._boundary = {
            "progress": trainer.progress.state_dict(),
            "rng": capture_rng_state(),
            "datamodule": copy.deepcopy(trainer.datamodule.state_dict()),
            "strategy_step": copy.deepcopy(trainer.strategy.step_state_dict()),
            "callbacks": copy.deepcopy({cb.state_key: cb.state_dict() for cb in trainer.callbacks}),
        }

    def on_exception(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, exception: BaseException) -> None:
        boundary = self._boundary
        if not self.save_on_exception or boundary is None or self._saving or trainer.stage != "fit":
            return
        step = boundary["progress"]["steps"]
        cause = f"{type(exception).__name__}: {str(exception).splitlines()[0] if str(exception) else ''}"
        consistent = (
            trainer.progress.optimizer_steps == boundary["progress"]["optimizer_steps"]
            and trainer.progress.steps == step
        )
        existing = self.resolve_dirpath(trainer) / f"step-{step:06d}"
        if step == 0 or not consistent or is_complete_checkpoint(existing):
            last = self.last_checkpoint_path(trainer)
            why = "" if consistent or step == 0 else " (the failing step had already changed the weights)"
            log.warning(f"rlforge: run stopped in step {step + 1} by {cause}; last checkpoint: {last}{why}")
            return
        self._crash_state = boundary
        try:
            path = self.save(trainer)
        finally:
            self._crash_state = None
        log.warning(
            f"rlforge: run stopped in step {step + 1} by {cause}; state after step {step} saved to {path} "
            "(resume with --ckpt_path last)"
        )

    def on_save_checkpoint(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, checkpoint: dict[str, Any]
    ) -> None:
        crash = self._crash_state
        if crash is None:
            return
        # Roll the parts the failed step advanced back to the step boundary (this callback runs last).
        checkpoint["progress"] = dict(crash["progress"])
        checkpoint["rng"] = crash["rng"]
        checkpoint["datamodule"] = crash["datamodule"]
        checkpoint["strategy"] = {**checkpoint["strategy"], **crash["strategy_step"]}
        checkpoint["callbacks"] = {**crash["callbacks"], self.state_key: self.state_dict()}

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
