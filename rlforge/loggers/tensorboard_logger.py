"""``TensorBoardLogger``: scalars, config and sample tables as TensorBoard event files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from lightning_utilities.core.imports import RequirementCache

from rlforge.errors import MissingDependencyError
from rlforge.loggers.base import FolderLogger, version_dir

_TENSORBOARD = RequirementCache("tensorboard")


class TensorBoardLogger(FolderLogger):
    """Writes ``<save_dir>/<name>/version_<n>/events.out.tfevents.*`` (view with ``tensorboard --logdir``).

    Args:
        save_dir: Root folder; ``None`` uses the trainer's ``default_root_dir``.
        name: Experiment name (sub-folder).
        version: Run version; ``None`` picks the next free ``version_<n>``.
    """

    def __init__(
        self, save_dir: str | None = None, name: str = "tensorboard", version: int | str | None = None
    ) -> None:
        if not _TENSORBOARD:
            raise MissingDependencyError(
                f"TensorBoardLogger needs tensorboard: pip install tensorboard ({_TENSORBOARD})"
            )
        self.save_dir, self.name, self._version = save_dir, name, version
        self._writer: Any = None

    def run_folder(self, default_root_dir: str) -> Path:
        return version_dir(Path(self.save_dir or default_root_dir) / self.name, self._version)

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter``, opened on first use."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        return self._writer

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.experiment.add_scalar(name, value, global_step=step)

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        text = yaml.safe_dump(params, sort_keys=False)
        self.experiment.add_text("config", "".join(f"    {line}\n" for line in text.splitlines()), global_step=0)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        def cell(value: Any) -> str:
            return str(value).replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
        self.experiment.add_text(key, "\n".join(lines), global_step=step)

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
