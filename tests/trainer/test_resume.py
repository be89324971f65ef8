"""Checkpoints: HF-loadable policy folder, and resume that reproduces an uninterrupted run exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rlforge import GRPOModule, ModelCheckpoint, RLDataModule, RLTrainer, WeightSync
from rlforge.errors import CheckpointError


def parity_reward(prompt: str, response: str, target: str) -> float:
    """A reward that varies with the sample, so losses are non-zero on an untrained model."""
    return float(len(response) % 2)


def _run(root: Path, max_steps: int, ckpt_path: str | None = None) -> Path:
    module = GRPOModule(model=_run.policy, group_size=4, reward_fns=[parity_reward], lr=1e-3)
    trainer = RLTrainer(
        max_steps=max_steps,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=None,
        callbacks=[WeightSync(sync_interval=3), ModelCheckpoint(every_n_steps=2)],
        seed=5,
    )
    trainer.fit(module, RLDataModule(batch_size=3), ckpt_path=ckpt_path)
    return trainer.log_dir / "metrics.csv"


def _losses(metrics_csv: Path) -> dict[int, str]:
    with open(metrics_csv) as f:
        return {int(row["step"]): row["train/loss"] for row in csv.DictReader(f) if row.get("train/loss")}


def test_resume_matches_uninterrupted_run(tiny_policy_dir, tmp_path):
    _run.policy = tiny_policy_dir
    straight = _losses(_run(tmp_path / "a", max_steps=5))
    _run(tmp_path / "b", max_steps=2)  # saves step-000002 (generator one version stale: sync every 3)
    resumed = _losses(_run(tmp_path / "b", max_steps=5, ckpt_path="last"))
    assert set(straight) == {1, 2, 3, 4, 5}
    assert any(float(v) != 0.0 for v in straight.values())
    assert resumed == straight  # history restored from the checkpoint plus identical new steps


def test_checkpoint_policy_loads_with_transformers(tiny_policy_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _run.policy = tiny_policy_dir
    _run(tmp_path, max_steps=2)
    ckpt = tmp_path / "rlforge" / "version_0" / "checkpoints" / "step-000002"
    model = AutoModelForCausalLM.from_pretrained(ckpt / "policy")
    tokenizer = AutoTokenizer.from_pretrained(ckpt / "policy")
    assert model.num_parameters() > 0 and tokenizer.eos_token_id is not None
    assert not list(
        (tmp_path / "rlforge" / "version_0" / "checkpoints").glob(".*tmp*")
    )  # no half-written folders left behind


def test_bad_ckpt_path_is_one_clear_error(tiny_policy_dir, tmp_path):
    _run.policy = tiny_policy_dir
    with pytest.raises(CheckpointError, match="not an rlforge checkpoint"):
        _run(tmp_path, max_steps=1, ckpt_path=str(tmp_path))
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        _run(tmp_path / "empty", max_steps=1, ckpt_path="last")
