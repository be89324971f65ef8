"""Staleness filter and truncated importance sampling, checked against hand-computed values."""

from __future__ import annotations

import math

import torch

from rlforge.offpolicy import drop_stale, truncated_is
from rlforge.types import Completion, Episode, TrainBatch


def _episode(version: int) -> Episode:
    return Episode("p", "t", Completion("x", [1], [0.0], [2], policy_version=version))


def test_drop_stale_keeps_groups_within_max_staleness():
    groups = [[_episode(5), _episode(5)], [_episode(3), _episode(4)], [_episode(4)]]
    kept, dropped = drop_stale(groups, policy_version=5, max_staleness=1)
    assert dropped == 1 and kept == [groups[0], groups[2]]
    assert drop_stale(groups, 5, 2) == (groups, 0)


def _batch(behaviour: list[list[float]], mask: list[list[float]], adv: list[float]) -> TrainBatch:
    b, t = len(behaviour), len(behaviour[0])
    return TrainBatch(
        input_ids=torch.zeros(b, t + 1, dtype=torch.long),
        attention_mask=torch.ones(b, t + 1, dtype=torch.long),
        response_mask=torch.tensor(mask),
        old_logprobs=torch.tensor(behaviour),
        ref_logprobs=None,
        advantages=torch.tensor(adv),
        policy_version=torch.zeros(b, dtype=torch.long),
        prompt_len=1,
    )


def test_truncated_is_weights_and_metrics_match_hand_computation():
    behaviour = [[-1.0, -2.0, -0.5], [-0.3, -0.3, 0.0]]
    prox = torch.tensor([[-0.5, -2.5, -0.5], [-1.3, 0.9, 0.0]])
    mask = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    batch, metrics = truncated_is(_batch(behaviour, mask, [2.0, -1.0]), prox * torch.tensor(mask), tis_cap=2.0)
    ratios = [math.exp(0.5), math.exp(-0.5), 1.0, math.exp(-1.0), math.exp(1.2)]
    weights = [min(r, 2.0) for r in ratios]
    expected = torch.tensor([[2 * weights[0], 2 * weights[1], 2 * weights[2]], [-weights[3], -weights[4], 0.0]])
    assert torch.allclose(batch.advantages, expected, atol=1e-6)
    assert torch.allclose(batch.old_logprobs, prox * torch.tensor(mask))  # PPO ratio now vs the proximal policy
    assert math.isclose(metrics["train/is_ratio_mean"], sum(ratios) / 5, rel_tol=1e-6)
    assert math.isclose(metrics["train/is_ratio_max"], math.exp(1.2), rel_tol=1e-6)
    assert metrics["train/is_ratio_clipped_frac"] == 1 / 5  # only exp(1.2) > 2


def test_truncated_is_is_the_identity_on_policy():
    behaviour = [[-1.0, -2.0], [-0.3, -0.7]]
    batch, metrics = truncated_is(_batch(behaviour, [[1, 1], [1, 1]], [1.5, -0.5]), torch.tensor(behaviour), 2.0)
    assert torch.allclose(batch.advantages, torch.tensor([[1.5, 1.5], [-0.5, -0.5]]))
    assert metrics["train/is_ratio_mean"] == 1.0 and metrics["train/is_ratio_clipped_frac"] == 0.0
