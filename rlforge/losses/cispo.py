"""CISPO: clip the (detached) importance-sampling weight, never the gradient of any token."""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.losses.aggregation import aggregate
from rlforge.losses.base import PolicyLoss, masked_fraction


class CISPOLoss(PolicyLoss):
    r"""Clipped IS-weight Policy Optimization (MiniMax-M1, 2025; ScaleRL's ``ε_max`` form).

    .. code-block:: text

        r_it = π_θ(o_it) / π_old(o_it)
        w_it = sg(clip(r_it, w_min, ε_max))          sg = stop-gradient
        ℓ_it = -w_it Â_it log π_θ(o_it) + β D_it      (D = k3)
        L    = 1/(Σ_i |o_i|) Σ_i Σ_t ℓ_it             (token-level mean)

    Every token keeps its gradient ``w_it Â_it ∇log π_θ`` (PPO-style clipping drops it). ``clip_high`` is the
    absolute cap ``ε_max`` on the weight, as in ScaleRL and TRL's ``epsilon_high`` for ``loss_type="cispo"``
    (MiniMax writes the cap as ``1 + ε_high^IS``). ``clip_low`` is MiniMax's ``ε_low^IS``: the floor is
    ``w_min = 1 - clip_low``; ``None`` (MiniMax's and TRL's setting) means no floor.

    Metrics: ``clip_frac`` (tokens whose weight was clipped, either side), ``kl``, ``ratio_mean``,
    ``ratio_min``, ``ratio_max``.

    Args:
        clip_high: ``ε_max``, the largest importance weight (absolute, e.g. 5.0).
        clip_low: ``ε_low^IS``; weights below ``1 - clip_low`` are raised to it. ``None`` disables the floor.
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        kl_times_ratio: Multiply the per-token KL by the importance ratio (TRL's ``use_bias_correction_kl``).
    """

    advantage_weighted = True
    aggregation = "token-mean"

    def __init__(
        self,
        clip_high: float = 5.0,
        clip_low: float | None = None,
        beta: float = 0.0,
        kl_times_ratio: bool = False,
    ) -> None:
        super().__init__(beta=beta)
        if clip_high <= 0:
            raise ConfigError(f"clip_high={clip_high} must be > 0 (it is the absolute cap of the IS weight)")
        if clip_low is not None and not 0 <= clip_low <= 1:
            raise ConfigError(f"clip_low={clip_low} must be in [0, 1] (floor 1 - clip_low), or None for no floor")
        self.clip_high = clip_high
        self.clip_low = clip_low
        self.kl_times_ratio = kl_times_ratio

    def forward(
        self,
        logprobs: Tensor,
        ref_logprobs: Tensor | None,
        advantages: Tensor,
        padding_mask: Tensor,
        old_logprobs: Tensor | None = None,
    ) -> Tensor:
        x = self._prepare(logprobs, ref_logprobs, advantages, padding_mask, old_logprobs)
        ratio = torch.exp(x.log_ratio)
        floor = None if self.clip_low is None else 1 - self.clip_low
        weight = torch.clamp(ratio, min=floor, max=self.clip_high).detach()
        per_token_loss = -weight * x.advantages * x.logprobs
        per_token_loss = per_token_loss + self._kl_penalty(x, "k3", ratio if self.kl_times_ratio else None)
        loss = aggregate(per_token_loss, x.mask, self.aggregation)
        with torch.no_grad():
            clipped = ratio > self.clip_high
            if floor is not None:
                clipped = clipped | (ratio < floor)
            self.last_metrics["clip_frac"] = masked_fraction(clipped, x.valid)
        self._record_ratio(ratio, x.valid)
        return loss

    def extra_repr(self) -> str:
        return f"clip_high={self.clip_high}, clip_low={self.clip_low}, beta={self.beta}"
