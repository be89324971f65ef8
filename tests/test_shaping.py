"""DAPO's data side: overlong penalty, dynamic sampling and truncated-completion masking."""

from __future__ import annotations

import pytest
import torch

from rlforge.errors import ConfigError
from rlforge.shaping import (
    apply_overlong_penalty,
    dynamic_sample,
    has_reward_variance,
    mask_truncated,
    overlong_penalty,
)
from rlforge.types import Completion, Episode


def episode(reward: float = 0.0, length: int = 3, stop_reason: str = "stop") -> Episode:
    completion = Completion(
        text="x" * length,
        token_ids=[1] * length,
        logprobs=[-0.1] * length,
        prompt_ids=[0],
        stop_reason=stop_reason,
    )
    return Episode(prompt="p", target="t", completion=completion, reward=reward)


def group(*rewards: float) -> list[Episode]:
    return [episode(r) for r in rewards]


# ---- overlong penalty ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (99, -0.95), (100, -1.0), (101, -1.0), (500, -1.0)],
)
def test_overlong_penalty_by_hand(length, expected):
    assert overlong_penalty(length, max_len=100, cache_len=20) == pytest.approx(expected)
    assert overlong_penalty(length, max_len=100, cache_len=20, penalty=0.5) == pytest.approx(expected / 2)


def test_overlong_penalty_matches_trl():
    trl_rewards = pytest.importorskip("trl.rewards")
    punish = trl_rewards.get_soft_overlong_punishment(max_completion_len=64, soft_punish_cache=16)
    lengths = list(range(0, 80))
    expected = punish([[1] * n for n in lengths])
    assert [overlong_penalty(n, 64, 16) for n in lengths] == pytest.approx(expected)


def test_overlong_penalty_step_and_errors():
    assert overlong_penalty(10, max_len=10, cache_len=0) == 0.0
    assert overlong_penalty(11, max_len=10, cache_len=0) == -1.0
    for bad in (dict(max_len=0, cache_len=0), dict(max_len=10, cache_len=11), dict(max_len=10, cache_len=-1)):
        with pytest.raises(ConfigError, match="cache_len"):
            overlong_penalty(5, **bad)
    with pytest.raises(ConfigError, match="penalty"):
        overlong_penalty(5, 10, 2, penalty=-1.0)


def test_apply_overlong_penalty():
    episodes = [episode(1.0, length=5), episode(1.0, length=9), episode(0.0, length=12)]
    apply_overlong_penalty(episodes, max_len=10, cache_len=4)
    assert [e.reward for e in episodes] == pytest.approx([1.0, 0.25, -1.0])
    assert episodes[1].reward_breakdown["overlong_penalty"] == pytest.approx(-0.75)


# ---- dynamic sampling ---------------------------------------------------------------------------------------


def test_has_reward_variance():
    assert has_reward_variance(group(1.0, 0.0, 1.0))
    assert not has_reward_variance(group(0.5, 0.5, 0.5))
    assert not has_reward_variance(group(1.0))
    assert not has_reward_variance([])


class Sampler:
    """Returns the scripted lists of groups in turn and counts the calls."""

    def __init__(self, *calls: list[list[Episode]]) -> None:
        self.calls = list(calls)
        self.count = 0

    def __call__(self) -> list[list[Episode]]:
        self.count += 1
        return self.calls[self.count - 1] if self.count <= len(self.calls) else []


def test_dynamic_sample_filters_and_resamples():
    informative = [group(1, 0), group(0, 1), group(1, 0.5)]
    flat = [group(1, 1), group(0, 0)]
    sampler = Sampler([informative[0], flat[0]], [flat[1], informative[1], informative[2]])
    groups, stats = dynamic_sample(sampler, num_groups=2, max_tries=5)
    assert groups == [informative[0], informative[1]]  # the surplus informative group is cut
    assert sampler.count == 2
    assert stats == {
        "rollout/dynamic_tries": 2.0,
        "rollout/dropped_groups": 2.0,
        "rollout/topped_up_groups": 0.0,
        "rollout/sampled_groups": 5.0,
    }


def test_dynamic_sample_first_call_enough():
    sampler = Sampler([group(1, 0), group(0, 1)])
    groups, stats = dynamic_sample(sampler, num_groups=2, max_tries=3)
    assert len(groups) == 2 and sampler.count == 1
    assert stats["rollout/dynamic_tries"] == 1.0 and stats["rollout/dropped_groups"] == 0.0


def test_dynamic_sample_tops_up_after_max_tries():
    flat = [group(1, 1), group(0, 0), group(0.5, 0.5)]
    good = group(1, 0)
    sampler = Sampler([flat[0], good], [flat[1]], [flat[2]], [group(0, 1)])
    groups, stats = dynamic_sample(sampler, num_groups=3, max_tries=3)
    assert sampler.count == 3  # never more than max_tries calls
    assert groups == [good, flat[0], flat[1]]  # informative first, then zero-variance groups to fill the batch
    assert stats["rollout/topped_up_groups"] == 2.0
    assert stats["rollout/dropped_groups"] == 1.0
    assert stats["rollout/dynamic_tries"] == 3.0


def test_dynamic_sample_not_enough_groups_at_all():
    groups, stats = dynamic_sample(Sampler([group(1, 1)]), num_groups=4, max_tries=2)
    assert len(groups) == 1
    assert stats["rollout/topped_up_groups"] == 1.0 and stats["rollout/sampled_groups"] == 1.0


def test_dynamic_sample_errors():
    with pytest.raises(ConfigError, match="num_groups"):
        dynamic_sample(Sampler(), num_groups=0, max_tries=1)
    with pytest.raises(ConfigError, match="max_tries"):
        dynamic_sample(Sampler(), num_groups=1, max_tries=0)


# ---- truncated-completion masking ---------------------------------------------------------------------------


def test_mask_truncated():
    episodes = [episode(), episode(stop_reason="length"), episode()]
    torch.testing.assert_close(mask_truncated(episodes), torch.tensor([1.0, 0.0, 1.0]))
    response_mask = torch.ones(3, 4, dtype=torch.long)
    masked = mask_truncated(episodes, response_mask)
    assert masked.dtype == torch.long
    assert masked.tolist() == [[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    with pytest.raises(ValueError, match="rows"):
        mask_truncated(episodes, torch.ones(2, 4))
