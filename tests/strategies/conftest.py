"""Monarch strategy test helpers: small fast runs of the default task."""

from __future__ import annotations

import csv
from pathlib import Path


def losses(root: Path | str) -> dict[int, float]:
    """``train/loss`` per step of the single run under ``root``."""
    (metrics,) = Path(root).glob("rlforge/version_*/metrics.csv")
    with open(metrics) as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def column(root: Path | str, name: str) -> dict[int, float]:
    (metrics,) = Path(root).glob("rlforge/version_*/metrics.csv")
    with open(metrics) as f:
        return {int(r["step"]): float(r[name]) for r in csv.DictReader(f) if r.get(name)}
