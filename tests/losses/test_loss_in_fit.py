"""Every built-in loss runs in `rlforge fit` when selected with --module.loss.class_path."""

from __future__ import annotations

import math

import pytest

from rlforge.cli import run
from tests.helpers import fast_flags, metric_rows

LOSSES = ["GRPOLoss", "DrGRPOLoss", "DAPOLoss", "CISPOLoss", "GSPOLoss", "SAPOLoss", "ReinforceLoss", "SimpleGRPOLoss"]


@pytest.mark.parametrize("loss", LOSSES)
def test_fit_runs_with_each_loss(loss, tiny_policy_dir, tmp_path):
    run(["fit", "--module.loss.class_path", f"rlforge.losses.{loss}", *fast_flags(tiny_policy_dir, tmp_path)])
    losses = [float(row["train/loss"]) for row in metric_rows(tmp_path)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
