"""Off-policy pieces of asynchronous rollouts: the staleness filter and truncated importance sampling.

With ``max_staleness >= 1`` rollouts are sampled by weights up to ``max_staleness`` versions older than
the policy being updated. The correction used here (decoupled PPO with truncated IS, as in AReaL /
"truncated importance sampling" for async RL):

* ``prox`` = logprobs of the response tokens under the CURRENT policy, before the update (no grad);
* the PPO ratio is taken against ``prox``: ``batch.old_logprobs <- prox`` (so clipping bounds the step
  from the current policy, not from the stale sampler);
* the off-policy gap between ``prox`` and the behaviour (sampler) logprobs ``mu`` is corrected by
  per-token weights ``w = min(exp(prox - mu), tis_cap)`` folded into the advantages (``[B, T]``,
  allowed by the loss contract): ``advantages[b, t] <- A[b] * w[b, t]``.

The loss signature is unchanged and, on-policy (``prox == mu``), ``w == 1`` and the ratio is the usual one.
"""

from __future__ import annotations

import torch

from rlforge.types import Group, TrainBatch


def drop_stale(groups: list[Group], policy_version: int, max_staleness: int) -> tuple[list[Group], int]:
    """Keeps the groups sampled at most ``max_staleness`` versions ago; returns them and the dropped count.

    A group is kept or dropped whole (its advantages are relative to each other).
    """
    kept = [g for g in groups if all(policy_version - ep.completion.policy_version <= max_staleness for ep in g)]
    return kept, len(groups) - len(kept)


def truncated_is(batch: TrainBatch, prox_logprobs: torch.Tensor, tis_cap: float) -> tuple[TrainBatch, dict[str, float]]:
    """Rewrites ``batch`` for the decoupled, truncated-IS update (see the module docstring).

    Args:
        batch: The collated batch; ``old_logprobs`` are the sampler's.
        prox_logprobs: Current-policy logprobs of the response tokens, ``[B, T]``.
        tis_cap: Upper bound of the importance weight.

    Returns:
        The new batch and ``train/is_ratio_mean``, ``train/is_ratio_max``, ``train/is_ratio_clipped_frac``
        over real response tokens.
    """
    mask = batch.response_mask > 0
    behaviour = batch.old_logprobs
    log_ratio = (prox_logprobs.float() - behaviour.float()).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio) * mask
    weight = ratio.clamp(max=tis_cap)
    advantages = batch.advantages.float()
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    real = ratio[mask]
    n = max(int(mask.sum()), 1)
    metrics = {
        "train/is_ratio_mean": float(real.sum()) / n,
        "train/is_ratio_max": float(real.max()) if real.numel() else 0.0,
        "train/is_ratio_clipped_frac": float((real > tis_cap).sum()) / n,
    }
    batch.old_logprobs = prox_logprobs.detach().float() * mask
    batch.advantages = advantages * weight
    return batch, metrics
