"""``RLDataModule``: prompts for rollouts and held-out prompts for validation, with resumable order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlforge.errors import ConfigError, DataError


def load_rows(path: str, prompt_field: str, target_field: str) -> list[dict[str, str]]:
    """Reads a local ``json``/``jsonl``/``parquet`` file with HF ``datasets`` and checks every row.

    Raises:
        DataError: naming the file, the row and the field that is missing or of the wrong type.
    """
    import datasets

    file = Path(path)
    if not file.exists():
        raise DataError(f"data file not found: {path}")
    suffix = file.suffix.lower()
    builder = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(suffix)
    if builder is None:
        raise DataError(f"{path}: unsupported data file type {suffix!r} (use .json, .jsonl or .parquet)")
    try:
        table = datasets.load_dataset(builder, data_files=str(file), split="train")
    except Exception as err:  # datasets raises many types for malformed files
        raise DataError(f"{path}: cannot be read as {builder}: {type(err).__name__}: {err}") from err
    rows = []
    for i, record in enumerate(table):
        row = {}
        for key, field in (("prompt", prompt_field), ("target", target_field)):
            value = record.get(field)
            if value is None:
                raise DataError(f"{path}: row {i}: missing field {field!r} (set data.{key}_field to map another)")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise DataError(
                    f"{path}: row {i}: field {field!r} must be a string or number, got {type(value).__name__}"
                )
            row[key] = str(value)
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


class RLDataModule:
    """Supplies prompt batches for training and the held-out split for validation.

    Either a built-in synthetic ``task`` or local files (``train_file``/``val_file``). The training
    order is a seeded shuffle per epoch and its position is saved in checkpoints, so a resumed run
    sees the same prompts as an uninterrupted one.

    Args:
        task: Built-in task name (``addition``, ``reverse``, ...); ignored when ``train_file`` is set.
        train_file: Local ``.json``/``.jsonl``/``.parquet`` file of training prompts.
        val_file: Local file of held-out prompts (required with ``train_file`` for validation).
        prompt_field: Column holding the prompt text.
        target_field: Column holding the reference answer.
        batch_size: Prompts per RL step (each sampled ``group_size`` times).
        val_size: Use only the first ``val_size`` held-out rows (``None``: all).
        seed: Seed of the task generator and of the shuffling.
    """

    def __init__(
        self,
        task: str | None = "addition",
        train_file: str | None = None,
        val_file: str | None = None,
        prompt_field: str = "prompt",
        target_field: str = "target",
        batch_size: int = 16,
        val_size: int | None = None,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        if task is None and train_file is None:
            raise ConfigError("data: set either `task` (a built-in task) or `train_file`")
        self.task, self.train_file, self.val_file = task, train_file, val_file
        self.prompt_field, self.target_field = prompt_field, target_field
        self.batch_size, self.val_size, self.seed = batch_size, val_size, seed
        self.train_rows: list[dict[str, str]] = []
        self.val_rows: list[dict[str, str]] = []
        self._epoch, self._index = 0, 0
        self._order: list[int] = []

    def setup(self) -> None:
        """Loads or generates the rows (idempotent)."""
        if self.train_rows:
            return
        if self.train_file is not None:
            self.train_rows = load_rows(self.train_file, self.prompt_field, self.target_field)
            self.val_rows = load_rows(self.val_file, self.prompt_field, self.target_field) if self.val_file else []
        else:
            from rlforge.data.tasks import make_task

            splits = make_task(self.task, seed=self.seed)
            self.train_rows, self.val_rows = splits.train, splits.val
        if self.val_size is not None:
            self.val_rows = self.val_rows[: self.val_size]
        self._order = self._shuffled(self._epoch)

    def _shuffled(self, epoch: int) -> list[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(len(self.train_rows), generator=gen).tolist()

    def next_batch(self) -> list[dict[str, str]]:
        """The next ``batch_size`` training rows (wraps into a new shuffled epoch as needed)."""
        batch = []
        while len(batch) < self.batch_size:
            if self._index >= len(self._order):
                self._epoch, self._index = self._epoch + 1, 0
                self._order = self._shuffled(self._epoch)
            batch.append(self.train_rows[self._order[self._index]])
            self._index += 1
        return batch

    def val_dataset(self) -> list[dict[str, str]]:
        """Held-out rows (empty when none are configured)."""
        return self.val_rows

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "index": self._index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._epoch, self._index = int(state["epoch"]), int(state["index"])
        if self.train_rows:
            self._order = self._shuffled(self._epoch)
