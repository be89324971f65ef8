"""Exact resume of a LoRA run after a real SIGKILL (the full-fine-tune test's machinery, with `module.peft`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from tests.helpers import fast_flags  # noqa: E402
from tests.trainer.test_resume_sigkill import COLUMNS, _callbacks, _newest_run, _rows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
N = 5
LORA = "{class_path: peft.LoraConfig, init_args: {r: 8, lora_alpha: 16, target_modules: all-linear}}"


def _fit(policy: str, root: Path, killer: str | None = None, ckpt_path: str | None = None) -> int:
    flags = fast_flags(policy, root, trainer__max_steps=N, module__lr=0.01, trainer__seed=3)
    # Stale generator weights across checkpoints (sync_interval 3), adaptive beta (KL against the base model).
    flags += ["--trainer.callbacks", _callbacks(killer), "--module.init_args.peft", LORA]
    if ckpt_path:
        flags += ["--ckpt_path", ckpt_path]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit", *flags], cwd=REPO, env=env, capture_output=True, text=True
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"rlforge fit failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


@pytest.mark.slow
def test_lora_sigkill_then_resume_is_bitwise_exact(tiny_policy_dir, tmp_path):
    assert _fit(tiny_policy_dir, tmp_path / "straight") == 0
    straight = {int(r["step"]): r for r in _rows(_newest_run(tmp_path / "straight"))}
    assert sorted(straight) == list(range(1, N + 1))
    assert len({straight[s]["train/kl"] for s in straight}) > 1  # the KL to the adapter-free base moves

    killed = tmp_path / "k2"  # killed after the optimizer step of step 3: its update is lost
    killer = "{class_path: tests.trainer.kill_callbacks.KillAfterUpdate, init_args: {step: 3}}"
    assert _fit(tiny_policy_dir, killed, killer) == -signal.SIGKILL
    assert json.loads((killed / "rlforge" / "version_0" / "checkpoints" / "last.json").read_text())["step"] == 2
    saved = killed / "rlforge" / "version_0" / "checkpoints" / "step-000002" / "policy"
    assert (saved / "adapter_model.safetensors").is_file()

    assert _fit(tiny_policy_dir, killed, ckpt_path="last") == 0
    resumed = _rows(_newest_run(killed))
    assert [int(r["step"]) for r in resumed] == list(range(1, N + 1))
    for row in resumed:
        for column in COLUMNS:
            assert row[column] == straight[int(row["step"])][column], f"step {row['step']} {column}"
    assert any(float(straight[s]["train/loss"]) != 0.0 for s in range(3, N + 1))
