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

    Each step appends one row; the file is rewritten (atomically) only when a new metric name appears, so
    logging costs the same at step 10 and step 10,000 and the file is always a valid CSV with a complete header.

    Args:
        save_dir: Root folder; ``None`` uses the trainer's ``default_root_dir``.
        name: Experiment name (sub-folder).
        version: Run version; ``None`` picks the next free ``version_<n>``.
    """

    def __init__(self, save_dir: str | None = None, name: str = "rlforge", version: int | str | None = None) -> None:
        self.save_dir, self.name, self._version = save_dir, name, version
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = ["step"]
        self._last_row_at: int | None = None  # byte offset of the last row in the file; None: rewrite it

    def run_folder(self, default_root_dir: str) -> Path:
        return version_dir(Path(self.save_dir or default_root_dir) / self.name, self._version)

    @property
    def metrics_file(self) -> Path:
        return self.log_dir / "metrics.csv"

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step, **metrics}
        same_step = bool(self._rows) and self._rows[-1]["step"] == step
        if same_step:
            self._rows[-1].update(row)
        else:
            self._rows.append(row)
        new_columns = [k for k in row if k not in self._columns]
        self._columns += new_columns
        if new_columns or self._last_row_at is None:
            self._flush()
        else:
            self._write_last_row(replace=same_step)

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        atomic_write_text(self.log_dir / "hparams.yaml", yaml.safe_dump(params, sort_keys=False))

    def _encode(self, rows: list[dict[str, Any]], header: bool) -> bytes:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self._columns, lineterminator="\n")
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().encode()

    def _flush(self) -> None:
        """Rewrites the whole file (new columns, or the first write of this run)."""
        head = self._encode(self._rows[:-1], header=True)
        atomic_write_text(self.metrics_file, (head + self._encode(self._rows[-1:], header=False)).decode())
        self._last_row_at = len(head)

    def _write_last_row(self, replace: bool) -> None:
        """Appends the newest row, or rewrites it in place when more metrics arrived for the same step."""
        with open(self.metrics_file, "r+b") as f:
            if replace:
                f.truncate(self._last_row_at)
            self._last_row_at = f.seek(0, io.SEEK_END)
            f.write(self._encode(self._rows[-1:], header=False))

    def finalize(self, status: str) -> None:
        if self._log_dir is not None and self._rows and self._last_row_at is None:
            self._flush()

    def state_dict(self) -> dict[str, Any]:
        return {"rows": list(self._rows), "columns": list(self._columns)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rows = [dict(r) for r in state["rows"]]
        self._columns = list(state["columns"])
        self._last_row_at = None  # the restored history is written whole with the next row
