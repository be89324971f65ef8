"""Every built-in loss runs in `rlforge fit` when selected with --module.loss.class_path."""

from __future__ import annotations

import csv
import math

import pytest

from rlforge.cli import run

LOSSES = [
    "GRPOLoss",
    "DrGRPOLoss",
    "DAPOLoss",
    "CISPOLoss",
    "GSPOLoss",
    "SAPOLoss",
    "ReinforceLoss",
    "SimpleGRPOLoss",
]


@pytest.mark.parametrize("loss", LOSSES)
def test_fit_runs_with_each_loss(loss, tiny_policy_dir, tmp_path):
    run(
        [
            "fit",
            "--module.loss.class_path",
            f"rlforge.losses.{loss}",
            "--module.model",
            tiny_policy_dir,
            "--module.group_size",
            "3",
            "--module.sampling.max_new_tokens",
            "5",
            "--module.reward_fns",
            '["tests.test_cli.char_reward"]',
            "--data.batch_size",
            "2",
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "0",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_checkpointing",
            "false",
        ]
    )
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    losses = [float(row["train/loss"]) for row in csv.DictReader(open(metrics)) if row.get("train/loss")]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
