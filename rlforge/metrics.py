"""RL metrics computed from rollouts and validation samples (names are API, see DESIGN.md)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from rlforge.types import Group


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al., 2021): ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the problem.
        c: Correct samples among them.
        k: Budget.
    """
    if not 0 < k <= n:
        raise ValueError(f"pass_at_k needs 0 < k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def rollout_metrics(groups: Sequence[Group], policy_version: int) -> dict[str, float]:
    """``rollout/*`` metrics of one step's groups."""
    episodes = [ep for group in groups for ep in group]
    rewards = [ep.reward for ep in episodes]
    lengths = [len(ep.completion.token_ids) for ep in episodes]
    zero_std = [len({ep.reward for ep in group}) <= 1 for group in groups]
    return {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/response_len": statistics.fmean(lengths),
        "rollout/truncated_frac": statistics.fmean(ep.completion.truncated for ep in episodes),
        "rollout/zero_std_frac": statistics.fmean(zero_std),
        "rollout/staleness": statistics.fmean(policy_version - ep.completion.policy_version for ep in episodes),
    }


def validation_metrics(correct: Sequence[Sequence[bool]]) -> dict[str, float]:
    """``val/accuracy`` (mean correctness over all samples) and ``val/pass@k`` when k > 1 samples per prompt."""
    if not correct:
        return {}
    accuracy = statistics.fmean(statistics.fmean(row) for row in correct)
    metrics = {"val/accuracy": accuracy}
    k = len(correct[0])
    if k > 1:
        metrics[f"val/pass@{k}"] = statistics.fmean(pass_at_k(len(row), sum(row), k) for row in correct)
    return metrics
