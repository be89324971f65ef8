"""``PromptDataModule``: what ``RLDataModule`` and ``SFTDataModule`` share, so their ``data:`` blocks read the same.

Where the rows come from (``dataset``/``train_file``, ``val_file``, ``val_fraction``, hub splits, a
built-in ``task``), how many are used, the resumable shuffled order and the prompt length check are
defined once here; a subclass only turns one raw record into its row (:meth:`make_row`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlforge.data.limits import OVERLONG_CHOICES, prompt_length, quiet_tokenizer
from rlforge.data.prompts import check_target_format, read_records, split_rows
from rlforge.data.sampler import EpochSampler
from rlforge.errors import ConfigError, DataError


class PromptDataModule:
    """Base of the data modules; see ``RLDataModule`` for the arguments (both take the same ones)."""

    def __init__(
        self,
        task: str | None,
        train_file: str | None,
        val_file: str | None,
        batch_size: int,
        val_size: int | None,
        seed: int,
        dataset: str | None,
        dataset_config: str | None,
        train_split: str,
        val_split: str | None,
        target_format: str,
        val_fraction: float,
        max_train_rows: int | None,
        streaming: bool,
        max_prompt_tokens: int | None,
        overlong_prompts: str,
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
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ConfigError(f"data.max_prompt_tokens must be >= 1 or null, got {max_prompt_tokens}")
        if overlong_prompts not in OVERLONG_CHOICES:
            raise ConfigError(
                f"data.overlong_prompts: unknown {overlong_prompts!r}; choose one of {', '.join(OVERLONG_CHOICES)}"
            )
        self.task, self.train_file, self.val_file = task, train_file, val_file
        self.dataset, self.dataset_config = dataset, dataset_config
        self.train_split, self.val_split, self.streaming = train_split, val_split, streaming
        self.target_format, self.val_fraction, self.max_train_rows = target_format, val_fraction, max_train_rows
        self.batch_size, self.val_size, self.seed = batch_size, val_size, seed
        self.max_prompt_tokens, self.overlong_prompts = max_prompt_tokens, overlong_prompts
        self.train_rows: list[dict[str, str]] = []
        self.val_rows: list[dict[str, str]] = []
        # (source, row number in it) of each row, so a problem found after loading still names file and row
        self._train_origin: list[tuple[str, int]] = []
        self._val_origin: list[tuple[str, int]] = []
        self._sampler: EpochSampler | None = None
        self._state: dict[str, Any] | None = None

    # --------------------------------------------------------------------------------- per subclass
    def make_row(self, record: dict[str, Any], source: str, index: int) -> dict[str, str]:
        """One row of this module from a raw record (``DataError`` naming ``source``, ``index`` and the field)."""
        raise NotImplementedError

    def task_row(self, row: dict[str, str]) -> dict[str, str]:
        """One row of this module from a built-in task row (``prompt``, ``target``, ``solution``)."""
        return row

    @property
    def prompt_column(self) -> str:
        """The column prompts are read from (for messages)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------- loading
    def _load(self, path: str, split: str, limit: int | None) -> tuple[list[dict[str, str]], list[tuple[str, int]]]:
        rows: list[dict[str, str]] = []
        for i, record in enumerate(read_records(path, split, self.dataset_config, self.streaming)):
            if limit is not None and i >= limit:
                break
            rows.append(self.make_row(record, path, i))
        if not rows:
            raise DataError(f"{path}: no rows")
        return rows, [(path, i) for i in range(len(rows))]

    def setup(self) -> None:
        """Loads or generates the rows (idempotent)."""
        if self.train_rows:
            return
        source = self.dataset if self.dataset is not None else self.train_file
        if source is not None:
            carve = self.val_fraction > 0
            rows, origin = self._load(source, self.train_split, None if carve else self.max_train_rows)
            if carve:
                self.train_rows, self.val_rows = split_rows(rows, self.val_fraction, self.seed)
                # split_rows depends only on the length, fraction and seed: the same cut of the origins
                self._train_origin, self._val_origin = split_rows(origin, self.val_fraction, self.seed)
            else:
                self.train_rows, self._train_origin = rows, origin
                if self.val_file is not None:
                    val_split = self.val_split or "train"
                    self.val_rows, self._val_origin = self._load(self.val_file, val_split, self.val_size)
                elif self.val_split is not None and not Path(source).is_file():
                    self.val_rows, self._val_origin = self._load(source, self.val_split, self.val_size)
        else:
            from rlforge.data.tasks import make_task

            splits = make_task(self.task, seed=self.seed)
            self.train_rows = [self.task_row(r) for r in splits.train]
            self.val_rows = [self.task_row(r) for r in splits.val]
            self._train_origin = [(f"task {self.task!r} train split", i) for i in range(len(self.train_rows))]
            self._val_origin = [(f"task {self.task!r} val split", i) for i in range(len(self.val_rows))]
        if self.max_train_rows is not None:
            self.train_rows = self.train_rows[: self.max_train_rows]
            self._train_origin = self._train_origin[: self.max_train_rows]
        if self.val_size is not None:
            self.val_rows = self.val_rows[: self.val_size]
            self._val_origin = self._val_origin[: self.val_size]
        self._make_sampler()

    def _make_sampler(self) -> None:
        self._sampler = EpochSampler(len(self.train_rows), self.batch_size, self.seed)
        if self._state is not None:
            self._sampler.load_state_dict(self._state)

    # ------------------------------------------------------------------------------ prompt lengths
    def limit_prompt_lengths(
        self, encode: Callable[[str], Sequence[int]], model_limit: int | None = None, reason: str = ""
    ) -> int:
        """Checks every prompt against the tighter of ``model_limit`` and ``max_prompt_tokens``, before any rollout.

        With ``overlong_prompts: error`` the first prompt over the limit is a ``DataError`` naming its file
        and row; with ``skip`` such rows are dropped and counted (a warning says how many).

        Args:
            encode: Prompt text -> token ids, exactly as the prompts will be fed to the generator.
            model_limit: The longest prompt the model can answer (``None``: no bound from the model).
            reason: Why ``model_limit`` is what it is, for the message.

        Returns:
            The number of rows dropped (``data/skipped_prompts``).
        """
        limits = [(model_limit, reason), (self.max_prompt_tokens, "data.max_prompt_tokens")]
        limits = [(value, why) for value, why in limits if value is not None]
        if not limits:
            return 0
        limit, why = min(limits, key=lambda item: item[0])
        skipped = 0
        for split in ("train", "val"):
            rows, origin = getattr(self, f"{split}_rows"), getattr(self, f"_{split}_origin")
            pairs = zip(rows, origin, strict=True)
            with quiet_tokenizer():
                kept = [(row, where) for row, where in pairs if self._fits(row, where, encode, limit, why)]
            skipped += len(rows) - len(kept)
            setattr(self, f"{split}_rows", [row for row, _ in kept])
            setattr(self, f"_{split}_origin", [where for _, where in kept])
        if skipped:
            warnings.warn(f"data: skipped {skipped} prompts longer than {limit} tokens ({why})", stacklevel=2)
            if not self.train_rows:
                raise DataError(f"data: every training prompt is longer than {limit} tokens ({why})")
            self._make_sampler()
        return skipped

    def _fits(
        self,
        row: dict[str, str],
        where: tuple[str, int],
        encode: Callable[[str], Sequence[int]],
        limit: int,
        why: str,
    ) -> bool:
        if not row["prompt"]:
            return True  # plain-text SFT rows have no prompt
        length, unit = prompt_length(row["prompt"], encode, limit)
        if unit == "tokens" and length <= limit:
            return True
        if self.overlong_prompts == "skip":
            return False
        source, index = where
        raise DataError(
            f"{source}: row {index}: field {self.prompt_column!r} is {length} {unit} long, over the limit of {limit} "
            f"prompt tokens ({why}); shorten it, or set data.overlong_prompts skip to drop such rows"
        )

    # ---------------------------------------------------------------------------------- iteration
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
