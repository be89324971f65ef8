"""Workflow 2: a user loss selected by YAML class_path trains inside GRPOModule."""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from examples.custom_loss import ClippedPGWithKL
from rlforge.cli import run
from rlforge.losses import GRPOLoss

REPO = Path(__file__).resolve().parents[2]


def test_custom_loss_matches_grpo_loss_with_k3():
    """The example equals the library's GRPOLoss (token-mean per sequence, k3) on random off-policy data."""
    torch.manual_seed(0)
    logprobs = (-torch.rand(4, 6) * 3).requires_grad_()
    old, ref = logprobs.detach() + 0.3 * torch.randn(4, 6), logprobs.detach() + 0.2 * torch.randn(4, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]]).float()
    adv = torch.randn(4)
    ours = ClippedPGWithKL(clip=0.2, beta=0.05)(logprobs, ref, adv, mask, old)
    theirs = GRPOLoss(clip_low=0.2, clip_high=0.2, beta=0.05)(logprobs, ref, adv, mask, old)
    torch.testing.assert_close(ours, theirs)


def test_custom_loss_trains_from_yaml(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    run(
        [
            "fit",
            "--config",
            "configs/custom_loss.yaml",
            "--module.model",
            tiny_policy_dir,
            "--module.group_size",
            "4",
            "--module.sampling.max_new_tokens",
            "6",
            "--module.reward_fns",
            '["tests.test_cli.char_reward"]',
            "--module.lr",
            "3e-3",
            "--data.batch_size",
            "4",
            "--trainer.max_steps",
            "4",
            "--trainer.val_check_interval",
            "0",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    rows = [row for row in csv.DictReader(open(metrics)) if row.get("train/loss")]
    assert len(rows) == 4
    kls = [float(row["train/kl"]) for row in rows]
    assert kls[0] == 0.0 and kls[-1] > 0.0  # the policy moved away from the reference: it trained
    assert all(float(row["train/grad_norm"]) > 0 for row in rows)
