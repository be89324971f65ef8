"""Test-only callbacks that end the process with a real SIGKILL at a chosen point (no cleanup runs)."""

from __future__ import annotations

import os
import signal

from rlforge import Callback


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAfterUpdate(Callback):
    """SIGKILL right after the optimizer step of RL step ``step`` (before it is counted, logged or saved).

    Args:
        step: The RL step (1-based) to die in.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step + 1 == self.step:
            _kill()


class KillDuringSave(Callback):
    """SIGKILL while the checkpoint of step ``step`` is being written (policy weights in the temp folder only).

    Args:
        step: The step whose checkpoint write is interrupted.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save_checkpoint(self, trainer, module, checkpoint) -> None:
        if trainer.global_step == self.step:
            # The trainer saves the tokenizer after the weights, inside the temp folder: die there.
            module.tokenizer.save_pretrained = lambda *args, **kwargs: _kill()
