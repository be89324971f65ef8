"""Test-only callback: one rank of a data-parallel run dies with SIGKILL (the others must not hang)."""

from __future__ import annotations

import os
import signal

from rlforge import Callback


class KillRank(Callback):
    """SIGKILL rank ``rank`` at the start of RL step ``step`` (1-based).

    Args:
        rank: The global rank that dies.
        step: The step it dies in.
    """

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_rollout_start(self, trainer, module) -> None:
        if trainer.global_rank == self.rank and trainer.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
