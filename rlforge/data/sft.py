"""Supervised fine-tuning data: (prompt, completion) or plain-text rows -> padded or packed token batches."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from rlforge.data.base import PromptDataModule
from rlforge.data.prompts import MISSING_ANSWER, extract_target, field_value
from rlforge.errors import DataError

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


SFT_FIELDS = {
    "plain": ("prompt", "solution", "target"),
    "gsm8k": ("question", "answer", "answer"),
    "math": ("problem", "solution", "solution"),
}
"""(prompt, completion, target) fields of each ``target_format``'s usual dataset (plain: the built-in tasks')."""


class SFTDataModule(PromptDataModule):
    """(prompt, completion) rows for ``rlforge sft``: a built-in task (its ``solution`` column), file or hub dataset.

    The arguments are ``RLDataModule``'s, with the same names and meanings, plus ``completion_field``;
    so a GSM8K run is ``--data.dataset openai/gsm8k --data.target_format gsm8k`` in both, and SFT's
    ``val/accuracy`` compares the greedy answer with the number after ``####`` as RL's does. Plain-text
    corpora are supported with ``prompt_field: ''``: the whole ``completion_field`` text is trained on.
    The training order is a seeded shuffle per epoch, saved in checkpoints.

    Args:
        task: Built-in task name (``addition``, ``reverse``, ``max``); ignored when ``dataset`` or
            ``train_file`` is set.
        train_file: Local ``.json``/``.jsonl``/``.parquet`` training file (or a hub id, like ``dataset``).
        val_file: File of held-out rows (``val/loss``, ``val/accuracy``), read like the training data.
        prompt_field: Column of the prompt (masked from the loss); ``null``: ``prompt`` (plain),
            ``question`` (gsm8k), ``problem`` (math); ``''``: none, plain-text training.
        target_field: Column the final answer is taken from (by ``target_format``); enables ``val/accuracy``.
            ``null``: ``target`` (plain; optional there), ``answer`` (gsm8k), ``solution`` (math).
        batch_size: Examples per optimizer step.
        val_size: Use only the first ``val_size`` held-out rows (``None``: all).
        seed: Seed of the task generator, of the shuffling and of the ``val_fraction`` split.
        dataset: Hub dataset id (``openai/gsm8k``; needs network or the HF cache) or a local file;
            exclusive with ``train_file``.
        dataset_config: Hub dataset configuration name (e.g. ``main`` for GSM8K).
        train_split: Hub split used for training.
        val_split: Hub split of the held-out rows (``null``: none); not used for a local file, nor when
            ``val_fraction`` or ``val_file`` is set.
        target_format: How the answer is taken from ``target_field``: ``plain`` (as is), ``gsm8k`` (the
            number after the last ``####``) or ``math`` (the last ``\\boxed{...}``).
        val_fraction: Hold out this fraction of the training rows (seeded by ``seed``); 0 disables.
        max_train_rows: Use at most this many training rows (``None``: all).
        streaming: Stream the hub dataset instead of downloading it whole.
        max_prompt_tokens: Longest prompt in tokens; ``null``: only the model's bound
            (``max_position_embeddings`` minus the validation ``max_new_tokens``), which always applies too.
        overlong_prompts: ``error`` (one line naming file and row) or ``skip`` (dropped and counted).
        completion_field: Column of the supervised completion (or the text); ``null``: ``solution``
            (plain, the built-in tasks' column), ``answer`` (gsm8k), ``solution`` (math).
    """

    def __init__(
        self,
        task: str | None = "addition",
        train_file: str | None = None,
        val_file: str | None = None,
        prompt_field: str | None = None,
        target_field: str | None = None,
        batch_size: int = 32,
        val_size: int | None = 100,
        seed: int = 0,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_split: str = "train",
        val_split: str | None = "test",
        target_format: str = "plain",
        val_fraction: float = 0.0,
        max_train_rows: int | None = None,
        streaming: bool = False,
        max_prompt_tokens: int | None = None,
        overlong_prompts: str = "error",
        completion_field: str | None = None,
    ) -> None:
        super().__init__(
            task=task,
            train_file=train_file,
            val_file=val_file,
            batch_size=batch_size,
            val_size=val_size,
            seed=seed,
            dataset=dataset,
            dataset_config=dataset_config,
            train_split=train_split,
            val_split=val_split,
            target_format=target_format,
            val_fraction=val_fraction,
            max_train_rows=max_train_rows,
            streaming=streaming,
            max_prompt_tokens=max_prompt_tokens,
            overlong_prompts=overlong_prompts,
        )
        prompt, completion, target = SFT_FIELDS[target_format]
        self.prompt_field = prompt if prompt_field is None else prompt_field
        self.completion_field = completion_field or completion
        self.target_field = target_field or target

    @property
    def prompt_column(self) -> str:
        return self.prompt_field

    def task_row(self, row: dict[str, str]) -> dict[str, str]:
        return {"prompt": row["prompt"], "completion": row["solution"], "target": row["target"]}

    def make_row(self, record: dict[str, Any], source: str, index: int) -> dict[str, str]:
        row = {"prompt": "", "target": ""}
        if self.prompt_field:
            if isinstance(record, dict) and record.get(self.prompt_field) is None:
                raise DataError(
                    f"{source}: row {index}: missing field {self.prompt_field!r} (set data.prompt_field to map "
                    "another, or '' to train on plain text)"
                )
            row["prompt"] = field_value(record, self.prompt_field, "prompt", source, index)
        row["completion"] = field_value(record, self.completion_field, "completion", source, index)
        if self.target_format == "plain" and record.get(self.target_field) is None:
            return row  # a plain target is optional: it only enables val/accuracy
        target = field_value(record, self.target_field, "target", source, index)
        row["target"] = extract_target(target, self.target_format) or ""
        if not row["target"]:
            raise DataError(
                f"{source}: row {index}: field {self.target_field!r} {MISSING_ANSWER[self.target_format]} "
                f"(target_format={self.target_format!r})"
            )
        return row
