"""Crash checkpoints (nothing is lost when a step fails before changing the weights) and robust `last`."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from rlforge import Callback, GRPOModule, ModelCheckpoint, RLDataModule, RLTrainer, WeightSync
from rlforge.callbacks.checkpoint import find_last_checkpoint
from rlforge.errors import NonFiniteError
from rlforge.losses import GRPOLoss
from rlforge.trainer.optimization import _nonfinite_grad_name
from tests.helpers import char_reward


class FailInRollout(Callback):
    """Raises in the rollout of step ``step`` (after sampling consumed RNG and data)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_rollout_end(self, trainer, module, groups) -> None:
        if trainer.global_step + 1 == self.step:
            raise RuntimeError("reward server went away")


class NaNFromCall(GRPOLoss):
    """GRPOLoss whose value becomes NaN from its ``start``-th call on (one call per step here)."""

    def __init__(self, start: int) -> None:
        super().__init__()
        self.start, self.calls = start, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        loss = super().forward(*args, **kwargs)
        return loss * float("nan") if self.calls >= self.start else loss


def _trainer(root: Path, max_steps: int, *extra: Callback, **kwargs) -> RLTrainer:
    return RLTrainer(
        max_steps=max_steps,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=None,
        callbacks=[WeightSync(sync_interval=2), ModelCheckpoint(every_n_steps=100), *extra],
        seed=11,
        **kwargs,
    )


def _module(policy: str, loss=None) -> GRPOModule:
    return GRPOModule(model=policy, group_size=3, reward_fns=[char_reward], lr=1e-2, **({"loss": loss} if loss else {}))


def _losses(trainer: RLTrainer) -> dict[int, str]:
    with open(trainer.log_dir / "metrics.csv") as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def test_failed_step_is_saved_as_the_previous_one_and_resume_is_exact(tiny_policy_dir, tmp_path, caplog):
    straight = _trainer(tmp_path / "a", 4)
    straight.fit(_module(tiny_policy_dir), RLDataModule(batch_size=2))

    crashed = _trainer(tmp_path / "b", 4, FailInRollout(step=3))
    with caplog.at_level(logging.WARNING, logger="rlforge"), pytest.raises(RuntimeError, match="went away"):
        crashed.fit(_module(tiny_policy_dir), RLDataModule(batch_size=2))
    ckpt = tmp_path / "b" / "rlforge" / "version_0" / "checkpoints"
    assert json.loads((ckpt / "last.json").read_text())["step"] == 2  # no periodic save before: the crash wrote it
    assert "run stopped in step 3 by RuntimeError: reward server went away" in caplog.text
    assert "state after step 2 saved" in caplog.text

    resumed = _trainer(tmp_path / "b", 4)
    resumed.fit(_module(tiny_policy_dir), RLDataModule(batch_size=2), ckpt_path="last")
    assert _losses(resumed) == _losses(straight)  # RNG, data position and generator RNG rolled back to step 2


def test_non_finite_stop_names_step_and_tensor_and_checkpoints(tiny_policy_dir, tmp_path, caplog):
    trainer = _trainer(tmp_path, 10, max_consecutive_skips=2)
    with caplog.at_level(logging.WARNING, logger="rlforge"), pytest.raises(NonFiniteError) as err:
        trainer.fit(_module(tiny_policy_dir, NaNFromCall(start=3)), RLDataModule(batch_size=2))
    message = str(err.value)
    assert "\n" not in message and message.startswith("step 4: non-finite loss (loss=nan")
    assert trainer.progress.skipped_steps == 2 and trainer.global_step == 3
    assert json.loads((tmp_path / "rlforge" / "version_0" / "checkpoints" / "last.json").read_text())["step"] == 3
    assert "state after step 3 saved" in caplog.text

    resumed = _trainer(tmp_path, 5)
    resumed.fit(_module(tiny_policy_dir), RLDataModule(batch_size=2), ckpt_path="last")
    assert resumed.global_step == 5 and sorted(_losses(resumed)) == [1, 2, 3, 4, 5]


def test_nonfinite_gradient_is_named():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    model[1].weight.grad[0, 1] = float("inf")
    assert _nonfinite_grad_name(model) == "gradient of 1.weight"


def test_last_skips_incomplete_checkpoints(tiny_policy_dir, tmp_path):
    trainer = _trainer(tmp_path, 2)
    trainer.callbacks[1].every_n_steps = 1
    trainer.fit(_module(tiny_policy_dir), RLDataModule(batch_size=2))
    ckpt = tmp_path / "rlforge" / "version_0" / "checkpoints"
    assert find_last_checkpoint(ckpt) == ckpt / "step-000002"

    # A folder that lacks its trainer state (written by hand or by a non-atomic copy) is never `last`,
    # even when last.json names it; the newest complete checkpoint is used instead.
    broken = ckpt / "step-000009"
    shutil.copytree(ckpt / "step-000002" / "policy", broken / "policy")
    (ckpt / "last.json").write_text(json.dumps({"name": "step-000009", "step": 9}))
    assert find_last_checkpoint(ckpt) == ckpt / "step-000002"
    (ckpt / "last.json").write_text("{truncated")
    assert find_last_checkpoint(ckpt) == ckpt / "step-000002"
    (ckpt / "step-000002" / "trainer_state.pt").unlink()
    assert find_last_checkpoint(ckpt) == ckpt / "step-000001"
