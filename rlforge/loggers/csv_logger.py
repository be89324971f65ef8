"""``CSVLogger``: the default logger, one ``metrics.csv`` per run folder."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import yaml

from rlforge.checkpoint_io import atomic_write_text
from rlforge.loggers.base import FolderLogger, version_dir


class CSVLogger(FolderLogger):
    """Writes ``<save_dir>/<name>/version_<n>/metrics.csv`` (one row per step, one column per metric).

    The file is rewritten atomically whenever a new metric name appears, so it is always a valid
    CSV with a complete header, even after a crash.

    Args:
        save_dir: Root folder; ``None`` uses the trainer's ``default_root_dir``.
        name: Experiment name (sub-folder).
        version: Run version; ``None`` picks the next free ``version_<n>``.
    """

    def __init__(self, save_dir: str | None = None, name: str = "rlforge", version: int | str | None = None) -> None:
        self.save_dir, self.name, self._version = save_dir, name, version
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = ["step"]

    def run_folder(self, default_root_dir: str) -> Path:
        return version_dir(Path(self.save_dir or default_root_dir) / self.name, self._version)

    @property
    def metrics_file(self) -> Path:
        return self.log_dir / "metrics.csv"

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step, **metrics}
        if self._rows and self._rows[-1]["step"] == step:
            self._rows[-1].update(row)
        else:
            self._rows.append(row)
        self._columns += [k for k in row if k not in self._columns]
        self._flush()

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        atomic_write_text(self.log_dir / "hparams.yaml", yaml.safe_dump(params, sort_keys=False))

    def _flush(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self._columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self._rows)
        atomic_write_text(self.metrics_file, buf.getvalue())

    def finalize(self, status: str) -> None:
        if self._log_dir is not None and self._rows:
            self._flush()

    def state_dict(self) -> dict[str, Any]:
        return {"rows": list(self._rows), "columns": list(self._columns)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rows = [dict(r) for r in state["rows"]]
        self._columns = list(state["columns"])
