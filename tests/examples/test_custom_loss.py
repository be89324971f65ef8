"""Workflow 2: a user loss selected by YAML class_path trains inside GRPOModule."""

from __future__ import annotations

from pathlib import Path

import torch

from examples.custom_loss import ClippedPGWithKL
from rlforge.cli import run
from rlforge.losses import GRPOLoss
from tests.helpers import fast_flags, metric_rows

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
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=4, module__lr=3e-3, module__group_size=4)
    run(["fit", "--config", "configs/custom_loss.yaml", *flags])
    rows = metric_rows(tmp_path)
    assert len(rows) == 4
    kls = [float(row["train/kl"]) for row in rows]
    assert kls[0] == 0.0 and kls[-1] > 0.0  # the policy moved away from the reference: it trained
    assert all(float(row["train/grad_norm"]) > 0 for row in rows)
