"""``ModelCheckpoint``: periodic, atomic, verified, resumable checkpoints, and one more when a run fails."""

from __future__ import annotations

import contextlib
import copy
import errno
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlforge.callbacks.callback import Callback
from rlforge.checkpoint_files import (
    CHECKPOINTS_DIR,
    LAST_POINTER,
    checkpoints_newest_first,
    find_last_checkpoint,
    runs_newest_first,
)
from rlforge.checkpoint_io import (
    atomic_write_json,
    capture_rng_state,
    is_complete_checkpoint,
    remove_orphans,
    unwritable_reason,
)
from rlforge.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import rlforge

__all__ = ["LAST_POINTER", "ModelCheckpoint", "find_last_checkpoint"]
log = logging.getLogger("rlforge")


@contextlib.contextmanager
def _second_interrupt_waits() -> Iterator[None]:
    """While the interrupt checkpoint is written, one more Ctrl-C only warns; a third abandons the save."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = 0

    def handler(signum: int, frame: Any) -> None:
        nonlocal presses
        presses += 1
        if presses >= 2:
            raise KeyboardInterrupt
        print("rlforge: finishing the checkpoint first (Ctrl-C again abandons it)", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _save_failure(err: OSError, path: Path, last: Path | None) -> str:
    kept = f"the last complete checkpoint {last} is kept" if last else "no earlier checkpoint exists"
    if err.errno == errno.ENOSPC:
        return f"saving checkpoint {path} failed: no space left on device; {kept} (free space, then --ckpt_path last)"
    return f"saving checkpoint {path} failed ({err.strerror or err}: {err.filename or path}); {kept}"


class ModelCheckpoint(Callback):
    """Saves ``step-NNNNNN/`` folders (HF policy folder + full trainer state) and a ``last.json`` pointer.

    Every write goes to a temp folder renamed into place, so a crash never leaves a half checkpoint
    and ``ckpt_path="last"`` always resumes from a complete one.

    When a run fails (a non-finite stop, a reward or generator error, Ctrl-C) before the failing step has
    changed the weights, the state at the end of the last completed step is still known exactly: it is
    saved as that step's checkpoint (and becomes ``last``), so nothing is lost and the resume is exact.

    Args:
        dirpath: Folder of the checkpoints (default ``<run folder>/checkpoints``, e.g.
            ``rlforge_runs/rlforge/version_0/checkpoints``).
        every_n_steps: Save every N RL steps (0 disables periodic saves).
        save_last: Also save after the last step.
        save_top_k: Keep this many checkpoints (-1 keeps all); with ``monitor``, the best ones, else the newest.
        monitor: Metric that ranks checkpoints (e.g. ``val/accuracy``).
        mode: ``max`` or ``min`` for ``monitor``.
        save_on_exception: On an error, save the last completed step if it has no checkpoint yet.
    """

    runs_last = True  # saves from on_train_step_end after every other hook of the step has run

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
        self._saving = self._save_failed = False
        self.last_path: Path | None = None  # newest checkpoint this run wrote

    def resolve_dirpath(self, trainer: rlforge.RLTrainer) -> Path:
        """``dirpath``, else ``<run folder>/checkpoints`` (each run keeps its own checkpoints)."""
        return Path(self.dirpath) if self.dirpath else Path(trainer.log_dir) / CHECKPOINTS_DIR

    def search_folders(self, trainer: rlforge.RLTrainer) -> list[Path]:
        """Where ``ckpt_path="last"`` looks, newest first: this run's folder, then earlier runs' (same parent)."""
        own = self.resolve_dirpath(trainer)
        if self.dirpath or not trainer.loggers:
            return [own]
        run = Path(trainer.log_dir)
        others = runs_newest_first(p for p in run.parent.iterdir() if p != run) if run.parent.is_dir() else []
        legacy = Path(trainer.default_root_dir) / CHECKPOINTS_DIR  # where rlforge < 0.2 kept every run's
        return [own, *(p / CHECKPOINTS_DIR for p in others), legacy]

    def resume_candidates(self, trainer: rlforge.RLTrainer) -> list[Path]:
        """Complete checkpoints ``last`` may resume from, best first (a damaged one falls back to the next)."""
        return [path for folder in self.search_folders(trainer) for path in checkpoints_newest_first(folder)]

    def last_checkpoint_path(self, trainer: rlforge.RLTrainer) -> Path | None:
        """The newest complete checkpoint ``ckpt_path="last"`` would resume from (not yet verified)."""
        found = self.resume_candidates(trainer)
        return found[0] if found else None

    @property
    def best_checkpoint_path(self) -> Path | None:
        """The best-scoring checkpoint saved (``monitor`` set), else ``None``."""
        scored = [e for e in self.saved if e.get("score") is not None and e.get("path")]
        if not self.monitor or not scored:
            return None
        pick = max if self.mode == "max" else min
        return Path(pick(scored, key=lambda e: e["score"])["path"])

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        self._save_failed = False
        if stage != "fit":
            return
        dirpath = self.resolve_dirpath(trainer)
        reason = unwritable_reason(dirpath)  # fail before step 1, not at the first save
        if reason is not None:
            field = "ModelCheckpoint.dirpath" if self.dirpath else "trainer.default_root_dir"
            raise CheckpointError(f"{field}: cannot write checkpoints to {dirpath} ({reason})")
        if trainer.is_global_zero:  # one writer: the other ranks would race rank 0's own temp folders
            for folder in self.search_folders(trainer):
                remove_orphans(folder)  # temp folders of saves a kill interrupted

    def should_save(self, trainer: rlforge.RLTrainer) -> bool:
        """Periodic saves, and the final one with ``save_last`` (asked at the end of every step)."""
        periodic = bool(self.every_n_steps) and trainer.global_step % self.every_n_steps == 0
        final = self.save_last and (trainer.global_step >= trainer.max_steps or trainer.should_stop)
        return periodic or final

    def save(self, trainer: rlforge.RLTrainer) -> Path:
        """Writes a checkpoint of the current step and updates ``last.json`` and top-k.

        Raises:
            CheckpointError: The write failed (e.g. no space left); the previous checkpoints are untouched.
        """
        dirpath = self.resolve_dirpath(trainer)
        name = f"step-{trainer.global_step:06d}"
        score = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        self._saving = True
        try:
            path = trainer.save_checkpoint(dirpath / name)  # with several ranks: every rank, rank 0 writes
            if trainer.is_global_zero:
                atomic_write_json(dirpath / LAST_POINTER, {"name": name, "step": trainer.global_step}, durable=True)
        except CheckpointError:
            self._save_failed = True
            raise
        except OSError as err:
            self._save_failed = True
            last = self.last_path or self.last_checkpoint_path(trainer)
            raise CheckpointError(_save_failure(err, dirpath / name, last)) from err
        finally:
            self._saving = False
        self.saved = [e for e in self.saved if e.get("path") != str(path)]
        self.saved.append({"name": name, "step": trainer.global_step, "score": score, "path": str(path)})
        self.last_path = path
        if trainer.is_global_zero:
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
        if self.should_save(trainer):
            self.save(trainer)
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
            "strategy_step": copy.deepcopy(trainer.rollout_state(step_only=True)),
            "callbacks": copy.deepcopy({cb.state_key: cb.state_dict() for cb in trainer.callbacks}),
        }

    def on_exception(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, exception: BaseException) -> None:
        boundary = self._boundary
        if not self.save_on_exception or boundary is None or self._saving or trainer.stage != "fit":
            return
        if self._save_failed:  # the error is the failed save itself: trying again would fail the same way
            return
        if trainer.world_size > 1:  # a save is a collective, and the rank that failed may be gone
            if trainer.is_global_zero:
                log.warning(
                    f"rlforge: run stopped in step {boundary['progress']['steps'] + 1} by {type(exception).__name__}; "
                    f"last checkpoint: {self.last_checkpoint_path(trainer)} (no crash checkpoint with several ranks)"
                )
            return
        interrupted = isinstance(exception, KeyboardInterrupt)
        report = log.info if interrupted else log.warning  # Ctrl-C: the CLI prints the one line
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
            report(f"rlforge: run stopped in step {step + 1} by {cause}; last checkpoint: {last}{why}")
            return
        self._crash_state = boundary
        try:
            with _second_interrupt_waits() if interrupted else contextlib.nullcontext():
                path = self.save(trainer)
        finally:
            self._crash_state = None
        report(
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
            path = Path(entry.get("path") or dirpath / entry["name"])
            if entry not in keep and path.parent == dirpath:  # an earlier run's checkpoints are never deleted
                shutil.rmtree(path, ignore_errors=True)
        self.saved = [e for e in self.saved if e in keep]

    def state_dict(self) -> dict[str, Any]:
        return {"saved": [dict(e) for e in self.saved]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.saved = [dict(e) for e in state_dict["saved"]]
