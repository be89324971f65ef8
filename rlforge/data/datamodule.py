"""``RLDataModule``: prompts for rollouts and held-out prompts for validation, with resumable order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlforge.data.prompts import DEFAULT_FIELDS, check_target_format, load_prompt_rows, split_rows
from rlforge.data.sampler import EpochSampler
from rlforge.errors import ConfigError


class RLDataModule:
    """Supplies prompt batches for training and the held-out split for validation.

    The prompts come from a dataset (``dataset``: a hub id such as ``openai/gsm8k`` or a local file;
    ``train_file``/``val_file``: local files) or, when neither ``dataset`` nor ``train_file`` is set,
    from a built-in synthetic ``task``. Held-out rows come from ``val_file``, else a seeded
    ``val_fraction`` of the training rows, else the hub split ``val_split``. The training order is a
    seeded shuffle per epoch and its position is saved in checkpoints, so a resumed run sees the same
    prompts as an uninterrupted one.

    Args:
        task: Built-in task name (``addition``, ``reverse``, ``max``); ignored when ``dataset`` or
            ``train_file`` is set (set it to ``null`` to make that explicit).
        train_file: Local ``.json``/``.jsonl``/``.parquet`` file of training prompts (like ``dataset``).
        val_file: File of held-out prompts, read like the training data.
        prompt_field: Column holding the prompt text; ``null``: ``prompt`` (plain), ``question`` (gsm8k),
            ``problem`` (math).
        target_field: Column holding the answer or worked solution; ``null``: ``target`` (plain),
            ``answer`` (gsm8k), ``solution`` (math).
        batch_size: Prompts per RL step (each sampled ``group_size`` times).
        val_size: Use only the first ``val_size`` held-out rows (``None``: all).
        seed: Seed of the task generator, of the shuffling and of the ``val_fraction`` split.
        dataset: Hub dataset id (``openai/gsm8k``, ``EleutherAI/hendrycks_math``; needs network or the
            HF cache) or a local ``.json``/``.jsonl``/``.parquet`` file. Takes precedence over ``task``;
            exclusive with ``train_file``.
        dataset_config: Hub dataset configuration name (``main`` for ``openai/gsm8k``, ``algebra``, ...).
        train_split: Hub split of the training prompts.
        val_split: Hub split of the held-out prompts (``null``: none); not used for a local file, nor
            when ``val_fraction`` or ``val_file`` is set.
        target_format: How the target is taken from ``target_field``: ``plain`` (as is), ``gsm8k`` (the
            number after the last ``####``, commas removed) or ``math`` (the last ``\\boxed{...}``).
        val_fraction: Hold out this fraction of the training rows (seeded by ``seed``) for validation;
            0 disables. Takes precedence over ``val_split``.
        max_train_rows: Use at most this many training rows (``None``: all).
        streaming: Stream the hub dataset instead of downloading it whole (with ``max_train_rows``/``val_size``
            only those rows are read).
    """

    def __init__(
        self,
        task: str | None = "addition",
        train_file: str | None = None,
        val_file: str | None = None,
        prompt_field: str | None = None,
        target_field: str | None = None,
        batch_size: int = 16,
        val_size: int | None = None,
        seed: int = 0,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_split: str = "train",
        val_split: str | None = "test",
        target_format: str = "plain",
        val_fraction: float = 0.0,
        max_train_rows: int | None = None,
        streaming: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        if dataset is not None and train_file is not None:
            raise ConfigError("data: set only one of `dataset` and `train_file` (they are the same thing)")
        if task is None and train_file is None and dataset is None:
            raise ConfigError("data: set `dataset` (hub id or file), `train_file` or `task` (a built-in task)")
        check_target_format(target_format)
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction must be in [0, 1), got {val_fraction}")
        if val_fraction > 0 and val_file is not None:
            raise ConfigError("data: set only one of `val_fraction` and `val_file`")
        for name, value in (("max_train_rows", max_train_rows), ("val_size", val_size)):
            if value is not None and value < 1:
                raise ConfigError(f"data.{name} must be >= 1 or null, got {value}")
        self.task, self.train_file, self.val_file = task, train_file, val_file
        self.dataset, self.dataset_config = dataset, dataset_config
        self.train_split, self.val_split, self.streaming = train_split, val_split, streaming
        default_prompt, default_target = DEFAULT_FIELDS[target_format]
        self.prompt_field, self.target_field = prompt_field or default_prompt, target_field or default_target
        self.target_format, self.val_fraction, self.max_train_rows = target_format, val_fraction, max_train_rows
        self.batch_size, self.val_size, self.seed = batch_size, val_size, seed
        self.train_rows: list[dict[str, str]] = []
        self.val_rows: list[dict[str, str]] = []
        self._sampler: EpochSampler | None = None
        self._state: dict[str, Any] | None = None

    def _load(self, path: str, split: str, limit: int | None) -> list[dict[str, str]]:
        return load_prompt_rows(
            path,
            split=split,
            name=self.dataset_config,
            streaming=self.streaming,
            question_field=self.prompt_field,
            answer_field=self.target_field,
            target_format=self.target_format,
            limit=limit,
        )

    def setup(self) -> None:
        """Loads or generates the rows (idempotent)."""
        if self.train_rows:
            return
        source = self.dataset if self.dataset is not None else self.train_file
        if source is not None:
            carve = self.val_fraction > 0
            self.train_rows = self._load(source, self.train_split, None if carve else self.max_train_rows)
            if carve:
                self.train_rows, self.val_rows = split_rows(self.train_rows, self.val_fraction, self.seed)
            elif self.val_file is not None:
                self.val_rows = self._load(self.val_file, self.val_split or "train", self.val_size)
            elif self.val_split is not None and not Path(source).is_file():
                self.val_rows = self._load(source, self.val_split, self.val_size)
        else:
            from rlforge.data.tasks import make_task

            splits = make_task(self.task, seed=self.seed)
            self.train_rows, self.val_rows = splits.train, splits.val
        if self.max_train_rows is not None:
            self.train_rows = self.train_rows[: self.max_train_rows]
        if self.val_size is not None:
            self.val_rows = self.val_rows[: self.val_size]
        self._sampler = EpochSampler(len(self.train_rows), self.batch_size, self.seed)
        if self._state is not None:
            self._sampler.load_state_dict(self._state)

    def next_batch(self) -> list[dict[str, str]]:
        """The next ``batch_size`` training rows (wraps into a new shuffled epoch as needed)."""
        return [self.train_rows[i] for i in self._sampler.next_indices()]

    def val_dataset(self) -> list[dict[str, str]]:
        """Held-out rows (empty when none are configured)."""
        return self.val_rows

    def state_dict(self) -> dict[str, Any]:
        return (
            self._sampler.state_dict() if self._sampler is not None else dict(self._state or {"epoch": 0, "index": 0})
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._state = {"epoch": int(state["epoch"]), "index": int(state["index"])}
        if self._sampler is not None:
            self._sampler.load_state_dict(self._state)
