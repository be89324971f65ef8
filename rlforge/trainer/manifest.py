"""The run manifest (``run.json``): what ran, with which config, seed, versions, hardware and git commit.

Written when a run starts (``status: running``) and updated atomically when it ends (status and duration).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlforge.checkpoint_io import atomic_write_json

if TYPE_CHECKING:
    import rlforge

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


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git installed, or it hung
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(cwd: str | Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git repository the run was started from, or ``None`` outside one."""
    cwd = Path(cwd or Path.cwd())
    commit = _git("rev-parse", "HEAD", cwd=cwd)
    if not commit:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=cwd)
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def write_manifest(path: Path, config: dict[str, Any] | None, seed: int, stage: str, **extra: Any) -> None:
    """Writes ``run.json`` next to the metrics, with ``status: running`` (``extra``: e.g. ``world_size``)."""
    atomic_write_json(
        path,
        {
            "command": sys.argv,
            "stage": stage,
            "status": "running",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seed": seed,
            "git": git_info(),
            "config": config,
            "versions": package_versions(),
            "hardware": hardware(),
            **extra,
        },
    )


def finish_manifest(path: Path, status: str, duration_s: float, **extra: Any) -> None:
    """Adds the end ``status`` (``success``, ``failed``, ``interrupted``), ``ended_at`` and ``duration_s``."""
    manifest = json.loads(path.read_text())
    manifest.update(
        status=status, ended_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), duration_s=round(duration_s, 3), **extra
    )
    atomic_write_json(path, manifest, durable=True)


def finish_run(trainer: rlforge.RLTrainer, manifest: Path, status: str, duration_s: float) -> None:
    """Records how the run ended in ``run.json`` and prints one line naming its folder and checkpoints."""
    callback = trainer.checkpoint_callback if trainer.stage == "fit" else None
    last = (callback.last_path or callback.last_checkpoint_path(trainer)) if callback is not None else None
    best = callback.best_checkpoint_path if callback is not None else None
    checkpoints = {"last_checkpoint": str(last) if last else None, "best_checkpoint": str(best) if best else None}
    try:
        finish_manifest(manifest, status, duration_s, **checkpoints)
    except (OSError, ValueError) as err:  # never hide how the run ended behind a bookkeeping error
        print(f"rlforge: warning: could not update {manifest} ({err})", file=sys.stderr)
    line = f"rlforge: {status} after {duration_s:.1f}s; run folder {trainer.log_dir}"
    if callback is not None:
        line += f"; last checkpoint {last or 'none'}" + (f"; best checkpoint {best}" if best else "")
    print(line, flush=True)
