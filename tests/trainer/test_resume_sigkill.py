"""Exact resume after a real SIGKILL: `rlforge fit` subprocesses killed mid-step and mid-save, resumed with `last`.

Acceptance: steps k+1..N of the resumed run have bitwise the same train/loss and rollout/reward_mean as an
uninterrupted run (k = 2 and 4 of N = 6), and a checkpoint half-written by the kill is never resumed from.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fast_flags

REPO = Path(__file__).resolve().parents[2]
N = 6
COLUMNS = ("train/loss", "rollout/reward_mean", "train/beta", "train/kl")


def _callbacks(killer: str | None) -> str:
    items = [
        "{class_path: rlforge.WeightSync, init_args: {sync_interval: 3}}",  # stale generator across checkpoints
        "{class_path: rlforge.KLMonitor, init_args: {target: 0.01, horizon: 20, init_beta: 0.05}}",  # adaptive beta
        "{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}",
    ]
    if killer:
        items.append(killer)
    return "[" + ", ".join(items) + "]"


def _fit(policy: str, root: Path, killer: str | None = None, ckpt_path: str | None = None) -> int:
    flags = fast_flags(policy, root, trainer__max_steps=N, module__lr=0.01, trainer__seed=3)
    flags += ["--trainer.callbacks", _callbacks(killer)]
    if ckpt_path:
        flags += ["--ckpt_path", ckpt_path]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit", *flags], cwd=REPO, env=env, capture_output=True, text=True
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"rlforge fit failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def _rows(metrics_csv: Path) -> list[dict[str, str]]:
    with open(metrics_csv) as f:
        return [row for row in csv.DictReader(f) if row.get("train/loss")]


def _newest_run(root: Path) -> Path:
    return max(root.glob("rlforge/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_exact(tiny_policy_dir, tmp_path):
    assert _fit(tiny_policy_dir, tmp_path / "straight") == 0
    straight = {int(r["step"]): r for r in _rows(_newest_run(tmp_path / "straight"))}
    assert sorted(straight) == list(range(1, N + 1))
    assert len({straight[s]["train/beta"] for s in straight}) == N  # beta really adapts every step

    # k = 2: killed after the optimizer step of step 3 (its update is lost, never logged or saved).
    killed = tmp_path / "k2"
    assert (
        _fit(
            tiny_policy_dir, killed, "{class_path: tests.trainer.kill_callbacks.KillAfterUpdate, init_args: {step: 3}}"
        )
        == -signal.SIGKILL
    )
    assert json.loads((killed / "rlforge" / "version_0" / "checkpoints" / "last.json").read_text())["step"] == 2

    # k = 4: killed while writing step 5's checkpoint; the half-written temp folder stays on disk.
    half = tmp_path / "k4"
    assert (
        _fit(tiny_policy_dir, half, "{class_path: tests.trainer.kill_callbacks.KillDuringSave, init_args: {step: 5}}")
        == -signal.SIGKILL
    )
    leftovers = list((half / "rlforge" / "version_0" / "checkpoints").glob(".step-000005.tmp-*"))
    assert leftovers and (leftovers[0] / "policy" / "model.safetensors").is_file()
    assert not (leftovers[0] / "trainer_state.pt").exists()
    assert not (half / "rlforge" / "version_0" / "checkpoints" / "step-000005").exists()
    assert json.loads((half / "rlforge" / "version_0" / "checkpoints" / "last.json").read_text())["step"] == 4

    for root, k in ((killed, 2), (half, 4)):
        assert _fit(tiny_policy_dir, root, ckpt_path="last") == 0
        resumed = _rows(_newest_run(root))
        steps = [int(r["step"]) for r in resumed]
        assert steps == list(range(1, N + 1)), f"k={k}: rows {steps} (duplicated or missing steps)"
        for row in resumed:
            step = int(row["step"])
            for column in COLUMNS:
                assert row[column] == straight[step][column], f"k={k} step {step} {column}"
        assert any(float(straight[s]["train/loss"]) != 0.0 for s in range(k + 1, N + 1))
