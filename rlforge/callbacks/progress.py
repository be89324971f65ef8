"""``ProgressBar``: a rich progress bar with step, reward, KL, tokens/s and validation accuracy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rlforge.callbacks.callback import Callback

if TYPE_CHECKING:
    import rlforge


class ProgressBar(Callback):
    """Shows training progress on stderr; when stderr is not a terminal, prints one line every ``log_every_n_steps``.

    With several ranks only rank 0 shows it (the metrics it shows are reduced over every rank).

    Args:
        log_every_n_steps: Line frequency for non-interactive output (logs, CI).
    """

    def __init__(self, log_every_n_steps: int = 10) -> None:
        self.log_every_n_steps = log_every_n_steps
        self.console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task = None

    def on_train_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        if self.console.is_terminal and trainer.is_global_zero:
            self._progress = Progress(
                TextColumn("[bold]rlforge"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=trainer.max_steps, completed=trainer.global_step)

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        if not trainer.is_global_zero:
            return
        text = self._describe(metrics)
        if self._progress is not None:
            self._progress.update(self._task, completed=trainer.global_step, description=text)
        elif trainer.global_step % self.log_every_n_steps == 0 or trainer.global_step == trainer.max_steps:
            self.console.print(f"step {trainer.global_step}/{trainer.max_steps} {text}", highlight=False)

    def on_validation_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        shown = [f"{k}={_format(v, '.3f')}" for k, v in sorted(trainer.metrics.logged("val/").items())]
        if shown and trainer.is_global_zero:
            self.console.print(f"step {trainer.global_step}: {' '.join(shown)}", highlight=False)

    def on_train_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self._stop()

    def on_exception(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, exception: BaseException) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @staticmethod
    def _describe(metrics: dict[str, float]) -> str:
        parts = []
        for key, label, fmt in (
            ("rollout/reward_mean", "reward", ".3f"),
            ("train/kl", "kl", ".4f"),
            ("train/loss", "loss", ".4f"),
            ("perf/tokens_per_s", "tok/s", ".0f"),
        ):
            if key in metrics:  # unmeasured metrics (e.g. train/kl without a reference) are absent, not 0
                parts.append(f"{label}={_format(metrics[key], fmt)}")
        return " ".join(parts)


def _format(value: float, fmt: str) -> str:
    """``value`` in ``fmt`` without a sign on a value that rounds to zero (``-0.0000`` reads as a negative loss)."""
    text = f"{value:{fmt}}"
    if text.startswith("-") and math.isfinite(value) and float(text) == 0.0:
        return text[1:]
    return text
