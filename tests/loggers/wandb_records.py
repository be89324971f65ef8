"""Reads an offline W&B run's ``.wandb`` file: W&B's 7-byte header, then LevelDB-log-framed protobuf ``Record``s."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def history(path: Path) -> dict[int, dict[str, Any]]:
    """``step -> {metric: value}`` from the run's history records."""
    rows: dict[int, dict[str, Any]] = {}
    for record in read_records(path):
        if record.WhichOneof("record_type") == "history":
            items = {
                (item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item
            }
            rows.setdefault(int(record.history.step.num), {}).update(items)
    return rows


def config(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        updates = record.config.update if kind == "config" else record.run.config.update if kind == "run" else []
        for item in updates:
            out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


def artifacts(path: Path) -> list[Any]:
    return [r.artifact for r in read_records(path) if r.WhichOneof("record_type") == "artifact"]
