"""Local data files (``.jsonl``, ``.json``, ``.parquet``) read row by row, so every defect names its row.

Reading them here rather than through HF ``datasets`` turns a bad byte, a truncated last line or an
empty file into one :class:`~rlforge.errors.DataError` line naming the file, the row (0-based, like
every row number rlforge prints) and, for text files, the line, instead of a pyarrow traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlforge.errors import DataError

__all__ = ["LOCAL_SUFFIXES", "read_local_file"]

LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")
"""Suffixes of the local files rlforge reads itself."""


def _one_line(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _decode(raw: bytes, path: Path, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 1].hex()
        raise DataError(
            f"{path}: {where}: not valid UTF-8 (byte 0x{bad} at column {err.start + 1}); re-save the file as UTF-8"
        ) from err


def _record(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{path}: {where}: expected a JSON object with named fields, got {type(value).__name__}")
    return value


def _read_json_lines(path: Path, data: bytes) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue  # blank lines (and the final newline) hold no row
        where = f"row {len(records)} (line {number})"
        text = _decode(raw, path, where)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            last = all(not rest.strip() for rest in lines[number:])
            hint = "; the last line looks truncated" if last else ""
            raise DataError(f"{path}: {where}: invalid JSON: {err.msg} (column {err.colno}){hint}") from err
        records.append(_record(value, path, where))
    return records


def _read_json(path: Path, data: bytes) -> list[dict[str, Any]]:
    """A JSON array of objects, or JSON Lines saved as ``.json`` (both are what HF ``datasets`` accepts)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line}: not valid UTF-8 (byte 0x{data[err.start : err.start + 1].hex()})"
        ) from err
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("{"):
            return _read_json_lines(path, data)
        raise DataError(f"{path}: line {err.lineno}: invalid JSON: {err.msg} (column {err.colno})") from err
    if isinstance(value, dict):
        return [_record(value, path, "row 0")]
    if not isinstance(value, list):
        raise DataError(f"{path}: expected a JSON array of objects or JSON Lines, got {type(value).__name__}")
    return [_record(item, path, f"row {i}") for i, item in enumerate(value)]


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise DataError(f"{path}: cannot be read as parquet: {type(err).__name__}: {_one_line(err)}") from err
    records: list[dict[str, Any]] = []
    for batch in table.to_batches():
        for i in range(batch.num_rows):
            try:
                records.append(batch.slice(i, 1).to_pylist()[0])
            except UnicodeDecodeError as err:
                raise DataError(f"{path}: row {len(records)}: a string column is not valid UTF-8") from err
    return records


def read_local_file(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a local ``.jsonl``/``.json``/``.parquet`` file as dicts.

    Raises:
        DataError: one line naming the file and the row (and line) that cannot be read, or the empty file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise DataError(f"{path}: unsupported data file type {suffix!r} (use .json, .jsonl or .parquet)")
    if suffix == ".parquet":
        records = _read_parquet(path)
    else:
        data = path.read_bytes()
        if not data.strip():
            raise DataError(f"{path}: the file is empty (expected one JSON object per row)")
        records = _read_json_lines(path, data) if suffix == ".jsonl" else _read_json(path, data)
    if not records:
        raise DataError(f"{path}: no rows")
    return records
