"""Prompt datasets for RL (GSM8K, MATH, your own files) and chat-template prompt encoding.

One loading function, :func:`load_prompt_rows`, reads a local ``.json``/``.jsonl``/``.parquet`` file or
a hub dataset with HF ``datasets``, checks every row and extracts the reference answer:

- ``plain``: the answer field as is;
- ``gsm8k``: the text after the last ``####`` (commas removed), e.g. ``"... #### 1,200"`` -> ``"1200"``;
- ``math``: the content of the last ``\\boxed{...}`` (nested braces kept), e.g. ``\\boxed{\\frac{3}{4}}``.

Every problem is a :class:`~rlforge.errors.DataError` of one line naming the file (or dataset id), the
row and the field.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlforge.data.files import read_local_file
from rlforge.errors import ConfigError, DataError
from rlforge.progress_bars import quiet_loading_bars
from rlforge.rewards.extract import extract_boxed, extract_hash

__all__ = [
    "FILE_BUILDERS",
    "TARGET_FORMATS",
    "DEFAULT_FIELDS",
    "check_target_format",
    "encode_chat_prompt",
    "extract_target",
    "load_prompt_rows",
    "prompt_row",
    "read_records",
    "split_rows",
]

TARGET_FORMATS = ("plain", "gsm8k", "math")
"""Valid ``target_format`` values."""

DEFAULT_FIELDS = {"plain": ("prompt", "target"), "gsm8k": ("question", "answer"), "math": ("problem", "solution")}
"""(question field, answer field) of each ``target_format``'s usual dataset."""

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
"""Local file suffix -> HF ``datasets`` builder."""


def _one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def check_target_format(target_format: str) -> None:
    """Raises ``ConfigError`` naming the choices if ``target_format`` is unknown."""
    if target_format not in TARGET_FORMATS:
        raise ConfigError(f"data.target_format: unknown {target_format!r}; choose one of {', '.join(TARGET_FORMATS)}")


def read_records(
    path: str, split: str = "train", name: str | None = None, streaming: bool = False
) -> Iterable[dict[str, Any]]:
    """The raw records of a local data file or a hub dataset split (``datasets.load_dataset``).

    An existing local ``.json``/``.jsonl``/``.parquet`` file is read as its only split (``split`` and
    ``name`` are ignored) by :func:`~rlforge.data.files.read_local_file`; anything else is passed to
    ``datasets.load_dataset(path, name, split=split, streaming=streaming)`` (hub ids such as ``openai/gsm8k``,
    local dataset folders).

    Raises:
        DataError: one line naming the file or dataset id (a hub id needs network or the HF cache).
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if file.is_file() or (suffix in FILE_BUILDERS and not file.exists()):
        if not file.exists():
            raise DataError(f"data file not found: {path}")
        return read_local_file(file)
    import datasets

    try:
        with quiet_loading_bars():
            return datasets.load_dataset(path, name, split=split, streaming=streaming)
    except Exception as err:  # unreachable hub, unknown id/config/split, ...
        where = "local dataset folder" if file.exists() else "hub dataset (needs network or the HF cache)"
        config = f" config {name!r}" if name else ""
        raise DataError(f"{path}{config} split {split!r}: cannot load {where}: {_one_line(err)}") from err


def extract_target(answer: str, target_format: str) -> str | None:
    """The reference answer in ``answer`` for ``target_format``, or ``None`` when it has none.

    >>> extract_target("3 + 4 = 7\\n#### 1,007", "gsm8k"), extract_target("so \\\\boxed{\\\\frac{3}{4}}.", "math")
    ('1007', '\\\\frac{3}{4}')
    """
    if target_format == "gsm8k":
        found = extract_hash(answer)
        target = found[-1].replace(",", "").strip() if found else ""
    elif target_format == "math":
        found = extract_boxed(answer)
        target = found[-1].strip() if found else ""
    else:
        check_target_format(target_format)
        target = answer
    return target if target.strip() else None


MISSING_ANSWER = {
    "plain": "is empty",
    "gsm8k": "has no answer after '####'",
    "math": "has no non-empty \\boxed{...}",
}


def field_value(record: dict[str, Any], field: str, key: str, source: str, index: int) -> str:
    """``record[field]`` as text, or a one-line ``DataError`` naming the source, row and field.

    Args:
        record: One raw row.
        field: Its column to read.
        key: The data-module argument that maps the column (``prompt`` -> ``data.prompt_field``).
        source: File path or dataset id, for the message.
        index: Row number, for the message.
    """
    if not isinstance(record, dict):
        raise DataError(f"{source}: row {index}: expected an object with named fields, got {type(record).__name__}")
    value = record.get(field)
    if value is None:
        raise DataError(f"{source}: row {index}: missing field {field!r} (set data.{key}_field to map another)")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(
            f"{source}: row {index}: field {field!r} must be a string or number, got {type(value).__name__}"
        )
    if isinstance(value, str) and not value.strip() and key != "target":
        raise DataError(f"{source}: row {index}: field {field!r} is empty")
    return str(value)


def load_prompt_rows(
    path: str,
    split: str = "train",
    name: str | None = None,
    streaming: bool = False,
    question_field: str = "question",
    answer_field: str = "answer",
    target_format: str = "plain",
    limit: int | None = None,
) -> list[dict[str, str]]:
    """Rows ``{"prompt": question, "target": extracted answer}`` of a local file or a hub dataset split.

    Args:
        path: Local ``.json``/``.jsonl``/``.parquet`` file, or a hub dataset id (e.g. ``openai/gsm8k``).
        split: Hub split (ignored for a local file).
        name: Hub dataset configuration (e.g. ``main`` for GSM8K).
        streaming: Stream the hub dataset instead of downloading it whole (pair it with ``limit``).
        question_field: Column holding the prompt text.
        answer_field: Column holding the answer or the worked solution.
        target_format: ``plain``, ``gsm8k`` or ``math`` (see the module docstring).
        limit: Read at most this many rows (``None``: all).

    Raises:
        ConfigError: unknown ``target_format``.
        DataError: one line naming the file/dataset, the row and the field that is missing, of the wrong
            type or without an answer; or the source cannot be read.
    """
    check_target_format(target_format)
    rows: list[dict[str, str]] = []
    for i, record in enumerate(read_records(path, split, name, streaming)):
        if limit is not None and i >= limit:
            break
        rows.append(prompt_row(record, path, i, question_field, answer_field, target_format))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def prompt_row(
    record: dict[str, Any], source: str, index: int, question_field: str, answer_field: str, target_format: str
) -> dict[str, str]:
    """One RL row ``{"prompt", "target"}`` of a raw record, or a one-line ``DataError`` naming source, row, field."""
    row = {
        key: field_value(record, field, key, source, index)
        for key, field in (("prompt", question_field), ("target", answer_field))
    }
    target = extract_target(row["target"], target_format)
    if target is None:
        raise DataError(
            f"{source}: row {index}: field {answer_field!r} {MISSING_ANSWER[target_format]} "
            f"(target_format={target_format!r})"
        )
    row["target"] = target
    return row


def split_rows(
    rows: Sequence[dict[str, str]], val_fraction: float, seed: int
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """A seeded (train, val) cut: ``round(len * val_fraction)`` rows (at least 1, at most ``len - 1``) held out.

    Both parts keep the original row order; the held-out indices depend only on ``len(rows)``,
    ``val_fraction`` and ``seed``.
    """
    if len(rows) < 2:
        raise DataError(f"data.val_fraction needs at least 2 training rows, got {len(rows)}")
    num_val = min(max(1, round(len(rows) * val_fraction)), len(rows) - 1)
    held_out = set(random.Random(seed).sample(range(len(rows)), num_val))
    train = [row for i, row in enumerate(rows) if i not in held_out]
    return train, [row for i, row in enumerate(rows) if i in held_out]


def encode_chat_prompt(tokenizer: Any, prompt: str, system_prompt: str | None = None) -> list[int]:
    """Token ids of ``[system?, user: prompt]`` through the tokenizer's chat template, with the generation prompt.

    Raises:
        ConfigError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"module.chat_template is true but the tokenizer of {getattr(tokenizer, 'name_or_path', '?')!r} has no "
            "chat template; set `module.chat_template false` or use an instruct/chat model's tokenizer"
        )
    messages = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    messages.append({"role": "user", "content": prompt})
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # transformers >= 5 returns a BatchEncoding by default
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]
