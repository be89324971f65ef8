"""Group-relative advantages: turn the rewards of G completions per prompt into per-completion advantages.

Methods, for reward ``r_ij`` of sample ``j`` in group ``i``:

- ``group``: ``(r_ij - mean_i) / (std_i + eps)``, ``std`` unbiased (GRPO, DeepSeekMath).
- ``drgrpo``: ``r_ij - mean_i`` (Dr.GRPO: no std division).
- ``rloo``: ``r_ij - 1/(G-1) Σ_{k≠j} r_ik`` (RLOO: leave-one-out baseline).
- ``batch``: ``(r_ij - mean_i) / (std_batch + eps)`` (REINFORCE++-baseline; TRL's ``scale_rewards="batch"``).

A group whose rewards are all equal carries no signal and gets advantages of exactly 0 for every method.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError

ADVANTAGE_METHODS = ("group", "drgrpo", "rloo", "batch")


def compute_advantages(rewards: Tensor, method: str = "group", eps: float = 1e-4) -> Tensor:
    """Advantages of each completion relative to the other completions of its prompt.

    Args:
        rewards: ``[num_groups, G]`` rewards, one row per prompt.
        method: One of ``ADVANTAGE_METHODS`` (see the module docstring).
        eps: Added to the standard deviation before dividing (``group`` and ``batch``).

    Returns:
        ``[num_groups, G]`` advantages (floating dtype of ``rewards``, or fp32 for integer rewards).

    Raises:
        ConfigError: ``method`` is unknown, or ``method`` is ``group``/``rloo`` with ``G == 1``.
    """
    if method not in ADVANTAGE_METHODS:
        raise ConfigError(f"advantage method={method!r} is unknown; choose one of {', '.join(ADVANTAGE_METHODS)}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, G]; got shape {tuple(rewards.shape)}")
    group_size = rewards.shape[1]
    if group_size < 2 and method in ("group", "rloo"):
        raise ConfigError(
            f"group size {group_size} cannot be group-normalised (advantage method={method!r}); "
            "set group_size >= 2 (or use method='drgrpo'/'batch')"
        )
    if not rewards.is_floating_point():
        rewards = rewards.float()
    constant = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)  # zero-variance groups -> exactly 0
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if method == "group":
        advantages = centered / (rewards.std(dim=1, keepdim=True) + eps)
    elif method == "drgrpo":
        advantages = centered
    elif method == "rloo":
        baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / (group_size - 1)
        advantages = rewards - baseline
    else:
        batch_std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())
        advantages = centered / (batch_std + eps)
    return torch.where(constant, torch.zeros_like(advantages), advantages)
