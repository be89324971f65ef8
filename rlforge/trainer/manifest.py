"""The run manifest (``run.json``): what ran, with which config, seed, versions and hardware."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from rlforge.checkpoint_io import atomic_write_json

_PACKAGES = ("rlforge", "torch", "transformers", "datasets", "jsonargparse", "lightning-utilities", "torchmetrics")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }
    return info


def write_manifest(path: Path, config: dict[str, Any] | None, seed: int, stage: str) -> None:
    """Writes ``run.json`` next to the metrics."""
    atomic_write_json(
        path,
        {
            "command": sys.argv,
            "stage": stage,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seed": seed,
            "config": config,
            "versions": package_versions(),
            "hardware": hardware(),
        },
    )
