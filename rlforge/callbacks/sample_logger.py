"""``SampleLogger``: a table of prompts, responses and rewards every N steps."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge
    from rlforge.types import Group

COLUMNS = ["step", "prompt", "response", "target", "reward", "advantage"]


class SampleLogger(Callback):
    """Every ``every_n_steps`` steps, appends ``num_samples`` rollouts to ``<run dir>/<filename>`` (JSON lines)
    and sends them as a ``samples`` table to every logger that supports tables (W&B, TensorBoard).

    Samples come from the first prompt groups of the step, so they are the same on a resumed run.

    Args:
        every_n_steps: Logging interval in RL steps.
        num_samples: Rollouts per table.
        filename: File in the run folder.
    """

    def __init__(self, every_n_steps: int = 10, num_samples: int = 4, filename: str = "samples.jsonl") -> None:
        if every_n_steps < 1 or num_samples < 1:
            raise ConfigError("SampleLogger.every_n_steps and num_samples must be >= 1")
        self.every_n_steps, self.num_samples, self.filename = every_n_steps, num_samples, filename

    def on_rollout_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, groups: list[Group]) -> None:
        step = trainer.global_step + 1  # the step these rollouts belong to
        if step % self.every_n_steps:
            return
        episodes = [ep for group in groups for ep in group][: self.num_samples]
        rows = [
            [step, ep.prompt, ep.completion.text, ep.target, float(ep.reward), float(ep.advantage)] for ep in episodes
        ]
        with open(trainer.log_dir / self.filename, "a") as f:
            for row in rows:
                f.write(json.dumps(dict(zip(COLUMNS, row, strict=True))) + "\n")
        for logger in trainer.loggers:
            logger.log_table("samples", COLUMNS, rows, step)
