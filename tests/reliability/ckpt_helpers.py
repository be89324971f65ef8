"""Helpers shared by the checkpoint/crash reliability tests: CLI subprocesses, run folders, short fits."""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from rlforge import GRPOModule, ModelCheckpoint, RLDataModule, RLTrainer
from tests.helpers import char_reward, fast_flags

REPO = Path(__file__).resolve().parents[2]
CALLBACKS = "tests.reliability.checkpoint_crash_callbacks"


# ------------------------------------------------------------------------------------------------ helpers
def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }


def _cli_args(policy: str, root: Path, *extra: str, callbacks: tuple[str, ...] = (), **overrides) -> list[str]:
    items = ["{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}", *callbacks]
    flags = fast_flags(policy, root, **overrides) + ["--trainer.callbacks", "[" + ", ".join(items) + "]"]
    return [sys.executable, "-m", "rlforge.cli", "fit", *flags, *extra]


def _cli(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)


def _rlforge_lines(stream: str) -> list[str]:
    """rlforge's own lines (third-party progress bars also write to stderr)."""
    return [line for line in stream.splitlines() if line.startswith("rlforge:")]


def _run_dir(root: Path, version: int = 0) -> Path:
    return root / "rlforge" / f"version_{version}"


def _ckpts(root: Path, version: int = 0) -> Path:
    return _run_dir(root, version) / "checkpoints"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trainer(root: Path, max_steps: int, every: int = 1, **kwargs) -> RLTrainer:
    return RLTrainer(
        max_steps=max_steps,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=None,
        callbacks=[ModelCheckpoint(every_n_steps=every)],
        seed=3,
        **kwargs,
    )


def _fit(policy: str, root: Path, max_steps: int, ckpt_path: str | None = None, **kwargs) -> RLTrainer:
    trainer = _trainer(root, max_steps, **kwargs)
    module = GRPOModule(model=policy, group_size=3, reward_fns=[char_reward], lr=1e-2)
    trainer.fit(module, RLDataModule(batch_size=2), ckpt_path=ckpt_path)
    return trainer


def _steps(metrics_csv: Path) -> list[int]:
    with open(metrics_csv) as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
