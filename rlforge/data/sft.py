"""Supervised fine-tuning data: (prompt, completion) or plain-text rows -> padded or packed token batches."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from rlforge.data.prompts import field_value, read_records
from rlforge.data.sampler import EpochSampler
from rlforge.errors import ConfigError, DataError

IGNORE_INDEX = -100


@dataclass
class SFTBatch:
    """Right-padded (or packed) sequences; ``labels`` is ``IGNORE_INDEX`` wherever no loss is taken."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device | str) -> SFTBatch:
        return SFTBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, index: torch.Tensor | slice) -> SFTBatch:
        return SFTBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @property
    def num_label_tokens(self) -> int:
        return int((self.labels[:, 1:] != IGNORE_INDEX).sum())


def tokenize_example(
    tokenizer: Any, prompt_ids: list[int], completion: str, max_length: int
) -> tuple[list[int], list[int]]:
    """``prompt + completion + EOS`` ids and labels with the prompt masked; truncated to ``max_length``."""
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = list(prompt_ids) + completion_ids
    labels = [IGNORE_INDEX] * len(prompt_ids) + completion_ids
    return ids[:max_length], labels[:max_length]


def collate_sft(
    examples: list[tuple[list[int], list[int]]], pad_token_id: int, packing: bool, max_length: int
) -> SFTBatch:
    """Pads examples to the longest one, or packs them greedily into rows of at most ``max_length`` tokens.

    Packed documents restart their position ids but, as in TRL's classic packing, may attend to earlier
    documents of the same row; their labels never cross a document boundary.
    """
    if not examples:
        raise DataError("SFT batch is empty")
    rows: list[tuple[list[int], list[int], list[int]]] = []
    for ids, labels in examples:
        positions = list(range(len(ids)))
        labels = [IGNORE_INDEX, *labels[1:]]  # the first token of a document is never predicted across a boundary
        if packing and rows and len(rows[-1][0]) + len(ids) <= max_length:
            rows[-1][0].extend(ids)
            rows[-1][1].extend(labels)
            rows[-1][2].extend(positions)
        else:
            rows.append((list(ids), list(labels), positions))
    width = max(len(r[0]) for r in rows)
    batch = len(rows)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    labels_t = torch.full((batch, width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    position_ids = torch.zeros((batch, width), dtype=torch.long)
    for i, (ids, labels, positions) in enumerate(rows):
        n = len(ids)
        input_ids[i, :n], labels_t[i, :n] = torch.tensor(ids), torch.tensor(labels)
        attention[i, :n], position_ids[i, :n] = 1, torch.tensor(positions)
    return SFTBatch(input_ids, attention, position_ids, labels_t)


class SFTDataModule:
    """(prompt, completion) rows for ``rlforge sft``: a built-in task (its ``solution`` column) or local files.

    Plain-text corpora are supported with ``prompt_field: null``: the whole ``completion_field`` text is
    trained on. The training order is a seeded shuffle per epoch, saved in checkpoints.

    Args:
        task: Built-in task name; ignored when ``train_file`` is set.
        train_file: Local ``.json``/``.jsonl``/``.parquet`` training file, or a hub dataset id (needs network
            or the HF cache), e.g. ``openai/gsm8k``.
        val_file: Local held-out file or hub id (``val/loss`` is computed on it); defaults to ``train_file``
            when ``val_split`` is set.
        dataset_config: Hub dataset configuration name (e.g. ``main`` for GSM8K).
        train_split: Hub split used for training.
        val_split: Hub split used for validation (e.g. ``test``).
        prompt_field: Column of the prompt (masked from the loss), or ``None`` for plain text.
        completion_field: Column of the supervised completion (or the text).
        target_field: Optional column of the final answer; enables ``val/accuracy`` by greedy decoding.
        batch_size: Examples per optimizer step.
        val_size: Use only the first ``val_size`` held-out rows.
        seed: Seed of the task generator and of the shuffling.
    """

    def __init__(
        self,
        task: str | None = "addition",
        train_file: str | None = None,
        val_file: str | None = None,
        dataset_config: str | None = None,
        train_split: str = "train",
        val_split: str | None = None,
        prompt_field: str | None = "prompt",
        completion_field: str = "solution",
        target_field: str | None = "target",
        batch_size: int = 32,
        val_size: int | None = 100,
        seed: int = 0,
    ) -> None:
        if task is None and train_file is None:
            raise ConfigError("data: set either `task` (a built-in task) or `train_file`")
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        self.task, self.train_file, self.val_file = task, train_file, val_file
        self.dataset_config, self.train_split, self.val_split = dataset_config, train_split, val_split
        self.prompt_field, self.completion_field, self.target_field = prompt_field, completion_field, target_field
        self.batch_size, self.val_size, self.seed = batch_size, val_size, seed
        self.train_rows: list[dict[str, str]] = []
        self.val_rows: list[dict[str, str]] = []
        self._sampler: EpochSampler | None = None

    def setup(self) -> None:
        """Loads or generates the rows (idempotent)."""
        if self.train_rows:
            return
        if self.train_file is not None:
            self.train_rows = self._read(self.train_file, self.train_split)
            val_source = self.val_file or (self.train_file if self.val_split else None)
            self.val_rows = self._read(val_source, self.val_split or "train") if val_source else []
        else:
            from rlforge.data.tasks import make_task

            splits = make_task(self.task, seed=self.seed)
            self.train_rows = [self._row(r, "task", i) for i, r in enumerate(splits.train)]
            self.val_rows = [self._row(r, "task", i) for i, r in enumerate(splits.val)]
        if self.val_size is not None:
            self.val_rows = self.val_rows[: self.val_size]
        self._sampler = EpochSampler(len(self.train_rows), self.batch_size, self.seed)

    def _read(self, path: str, split: str) -> list[dict[str, str]]:
        records = read_records(path, split=split, name=self.dataset_config)
        return [self._row(record, path, i) for i, record in enumerate(records)]

    def _row(self, record: dict[str, Any], source: str, index: int) -> dict[str, str]:
        row = {"prompt": "", "completion": "", "target": ""}
        for key, field in (
            ("prompt", self.prompt_field),
            ("completion", self.completion_field),
            ("target", self.target_field),
        ):
            if field is None or (key == "target" and record.get(field) is None):
                continue  # the target is optional: it only enables val/accuracy
            row[key] = field_value(record, field, key, source, index)
        return row

    def next_batch(self) -> list[dict[str, str]]:
        """The next ``batch_size`` training rows."""
        return [self.train_rows[i] for i in self._sampler.next_indices()]

    def val_dataset(self) -> list[dict[str, str]]:
        """Held-out rows."""
        return self.val_rows

    def state_dict(self) -> dict[str, Any]:
        return self._sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._sampler.load_state_dict(state)
