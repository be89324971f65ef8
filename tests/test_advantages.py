"""Group-relative advantages: each method by hand, exact zeros for zero-variance groups, and the errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlforge.advantages import ADVANTAGE_METHODS, compute_advantages
from rlforge.errors import ConfigError

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1], [3.0, 1.0, 2.0, 2.0]], dtype=torch.float64)


def test_methods_listed():
    assert ADVANTAGE_METHODS == ("group", "drgrpo", "rloo", "batch")


def test_group_by_hand():
    adv = compute_advantages(REWARDS, "group")
    std = math.sqrt(4 * 0.25 / 3)  # unbiased std of (1, 0, 0, 1)
    expected0 = torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64) / (std + 1e-4)
    torch.testing.assert_close(adv[0], expected0)
    std2 = math.sqrt(2 / 3)  # (3, 1, 2, 2): mean 2, squared deviations 1 + 1 + 0 + 0 over G - 1 = 3
    expected2 = torch.tensor([1.0, -1.0, 0.0, 0.0], dtype=torch.float64) / (std2 + 1e-4)
    torch.testing.assert_close(adv[2], expected2)
    assert adv.dtype == torch.float64
    torch.testing.assert_close(
        compute_advantages(REWARDS, eps=0.5)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]).double() / (std + 0.5)
    )


def test_drgrpo_by_hand():
    adv = compute_advantages(REWARDS, "drgrpo")
    torch.testing.assert_close(adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(adv[2], torch.tensor([1.0, -1.0, 0.0, 0.0], dtype=torch.float64))


def test_rloo_by_hand():
    adv = compute_advantages(REWARDS, "rloo")
    for g, row in enumerate(REWARDS.tolist()):
        for i, r in enumerate(row):
            others = [x for j, x in enumerate(row) if j != i]
            assert adv[g, i].item() == pytest.approx(r - sum(others) / len(others), abs=1e-12)
    # equivalently G/(G-1) times the centred reward
    torch.testing.assert_close(adv, compute_advantages(REWARDS, "drgrpo") * 4 / 3)


def test_batch_by_hand():
    adv = compute_advantages(REWARDS, "batch")
    batch_std = REWARDS.std().item()  # unbiased over all 12 rewards
    torch.testing.assert_close(adv, compute_advantages(REWARDS, "drgrpo") / (batch_std + 1e-4))


@pytest.mark.parametrize("method", ADVANTAGE_METHODS)
def test_zero_variance_groups_exactly_zero(method):
    # 0.1 repeated has a mean that is not exactly 0.1 in floating point; the result must still be exactly 0.
    rewards = torch.tensor([[0.1] * 7, [0.7] * 7, [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert (rewards[0] - rewards[0].mean()).abs().max() > 0  # the trap is real
    adv = compute_advantages(rewards, method)
    assert (adv[:2] == 0).all()
    assert (adv[2] != 0).all()
    assert (compute_advantages(torch.full((3, 4), 2.5), method) == 0).all()  # whole batch constant


@pytest.mark.parametrize("method", ["group", "rloo"])
def test_group_size_one_raises(method):
    with pytest.raises(ConfigError) as info:
        compute_advantages(torch.tensor([[1.0], [0.0]]), method)
    message = str(info.value)
    assert "group size 1 cannot be group-normalised" in message and "group_size >= 2" in message
    assert "\n" not in message


@pytest.mark.parametrize("method", ["drgrpo", "batch"])
def test_group_size_one_other_methods_give_zero(method):
    assert (compute_advantages(torch.tensor([[1.0], [0.0]]), method) == 0).all()


def test_unknown_method_and_shapes():
    with pytest.raises(ConfigError, match="group, drgrpo, rloo, batch"):
        compute_advantages(REWARDS, "ppo")
    with pytest.raises(ValueError, match="num_groups, G"):
        compute_advantages(torch.ones(4))


def test_integer_rewards_become_float():
    adv = compute_advantages(torch.tensor([[1, 0], [1, 1]]), "drgrpo")
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, torch.tensor([[0.5, -0.5], [0.0, 0.0]]))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=3),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(ADVANTAGE_METHODS),
)
def test_advantages_sum_to_zero_per_group(rows, method):
    rewards = torch.tensor(rows, dtype=torch.float64)
    adv = compute_advantages(rewards, method)
    assert torch.isfinite(adv).all()
    torch.testing.assert_close(adv.sum(dim=1), torch.zeros(len(rows), dtype=torch.float64), atol=1e-6, rtol=0)
    # ordering within a group is preserved (a better reward never gets a smaller advantage)
    order = rewards.argsort(dim=1)
    assert (adv.gather(1, order).diff(dim=1) >= -1e-9).all()
