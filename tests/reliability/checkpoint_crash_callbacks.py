"""Test-only callbacks for the checkpoint crash tests: pause for a signal, slow a save, fill the disk."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import torch

from rlforge import Callback


class PauseForSignal(Callback):
    """Writes ``<folder>/paused`` and sleeps in the rollout of step ``step``; every save writes ``<folder>/saving``
    and then takes ``save_seconds`` (so a test can send signals at known points).

    Args:
        folder: Where the marker files go.
        step: The RL step (1-based) whose rollout waits.
        save_seconds: Extra time each checkpoint save takes.
    """

    def __init__(self, folder: str, step: int, save_seconds: float = 0.0) -> None:
        self.folder, self.step, self.save_seconds = Path(folder), step, save_seconds

    def on_rollout_start(self, trainer, module) -> None:
        if trainer.global_step + 1 == self.step:
            (self.folder / "paused").write_text(str(self.step))
            time.sleep(120)

    def on_save_checkpoint(self, trainer, module, checkpoint) -> None:
        (self.folder / "saving").write_text(str(trainer.global_step))
        time.sleep(self.save_seconds)


class DiskFullAt(Callback):
    """The checkpoint write of step ``step`` fills the disk: half the trainer state lands, then ENOSPC.

    Args:
        step: The step whose save fails.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save_checkpoint(self, trainer, module, checkpoint) -> None:
        if trainer.global_step != self.step:
            return
        real_save = torch.save

        def full_disk(obj, f, *args, **kwargs):
            torch.save = real_save
            Path(f).write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", str(f))

        torch.save = full_disk
