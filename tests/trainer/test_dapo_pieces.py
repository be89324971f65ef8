"""DAPO's data-side pieces inside the loop: dynamic sampling, overlong punishment, overlong filtering."""

from __future__ import annotations

import csv

import pytest

from rlforge import GRPOModule, RLDataModule, RLTrainer, SamplingParams
from rlforge.errors import ConfigError


def zero(prompt: str, response: str, target: str) -> float:
    return 0.0


def parity(prompt: str, response: str, target: str) -> float:
    return float(len(response) % 2)


def _fit(tmp_path, **module_kwargs) -> list[dict[str, str]]:
    module = GRPOModule(model=_fit.policy, group_size=4, **module_kwargs)
    trainer = RLTrainer(
        max_steps=2,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        val_check_interval=None,
        enable_checkpointing=False,
    )
    trainer.fit(module, RLDataModule(batch_size=3))
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    return [row for row in csv.DictReader(open(metrics)) if row.get("train/loss")]


def test_dynamic_sampling_retries_then_tops_up(tiny_policy_dir, tmp_path):
    _fit.policy = tiny_policy_dir
    rows = _fit(tmp_path, reward_fns=[zero], dynamic_sampling=True, max_sampling_tries=3)
    for row in rows:  # no group has reward variance: every try is used, the batch is filled from dropped groups
        assert float(row["rollout/dynamic_tries"]) == 3
        assert float(row["rollout/sampled_groups"]) == 9 and float(row["rollout/topped_up_groups"]) == 3


def test_dynamic_sampling_keeps_informative_groups(tiny_policy_dir, tmp_path):
    _fit.policy = tiny_policy_dir
    rows = _fit(tmp_path, reward_fns=[parity], dynamic_sampling=True, max_sampling_tries=5)
    for row in rows:
        assert float(row["rollout/zero_std_frac"]) <= float(row["rollout/topped_up_groups"]) / 3


def test_overlong_punishment_and_filtering(tiny_policy_dir, tmp_path):
    _fit.policy = tiny_policy_dir
    # The untrained policy almost never emits EOS within 4 tokens: responses hit the cap.
    punished = _fit(tmp_path / "a", reward_fns=[zero], sampling=SamplingParams(max_new_tokens=4), overlong_cache_len=2)
    assert all(float(r["rollout/truncated_frac"]) > 0.9 for r in punished)
    assert all(float(r["rollout/reward_mean"]) < -0.8 for r in punished)  # -1 at the cap, linear before it
    filtered = _fit(
        tmp_path / "b", reward_fns=[parity], sampling=SamplingParams(max_new_tokens=4), filter_truncated=True
    )
    fully_truncated = [r for r in filtered if float(r["rollout/truncated_frac"]) == 1.0]
    assert fully_truncated
    assert all(float(r["train/grad_norm"]) == 0.0 for r in fully_truncated)  # no token left in the loss


def test_overlong_cache_len_must_fit(tiny_policy_dir):
    with pytest.raises(ConfigError, match="overlong_cache_len"):
        GRPOModule(model=tiny_policy_dir, overlong_cache_len=8)
