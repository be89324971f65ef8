"""The two seed losses of torchforge: REINFORCE with a clipped, detached IS weight, and simple GRPO."""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.losses.aggregation import aggregate
from rlforge.losses.base import PolicyLoss, masked_fraction


class ReinforceLoss(PolicyLoss):
    r"""REINFORCE with an optional clipped, detached importance weight (torchforge's ``ReinforceLoss``).

    .. code-block:: text

        w_it = sg(clip(π_θ(o_it) / π_old(o_it), lo, hi))     (no clip when ``clip_ratio`` is None)
        [lo, hi] = [1 - c, 1 + c]  for 0 < c < 1   (torchforge's seed: ``ReinforceLoss(clip_ratio=0.2)``)
        [lo, hi] = [1/c, c]        for c > 1       (a symmetric cap in log space: 10 means [0.1, 10])
        ℓ_it = -w_it Â_it log π_θ(o_it) + β D_it              (D = k3; β = 0 by default)
        L    = 1/G Σ_i 1/|o_i| Σ_t ℓ_it                       (seq-mean-token-mean)

    Unlike PPO-style clipping, tokens outside the trust region keep their gradient (only the weight is capped),
    which is what makes it differ from GRPO off-policy. On-policy (``old_logprobs=None``) ``w = 1``.
    Metrics: ``clip_frac`` (tokens whose weight was clipped), ``kl``, ``ratio_*``.

    Args:
        clip_ratio: ``c`` in ``(0, 1)`` clips the weight to ``[1 - c, 1 + c]`` (PPO's ``ε``, e.g. 0.2);
            ``c > 1`` clips it to ``[1/c, c]`` (e.g. 10 for ``[0.1, 10]``). ``c = 1`` is ambiguous and rejected;
            ``None`` leaves the weight unclipped.
        beta: KL penalty weight (0 by default; the attribute can be changed later by a KL controller).
    """

    advantage_weighted = True

    def __init__(self, clip_ratio: float | None = None, beta: float = 0.0) -> None:
        super().__init__(beta=beta)
        if clip_ratio is not None and not (0 < clip_ratio < 1 or clip_ratio > 1):
            raise ConfigError(
                f"clip_ratio={clip_ratio} must be in (0, 1) (weights clipped to [1 - c, 1 + c]), > 1 "
                "(clipped to [1/c, c]) or None"
            )
        self.clip_ratio = clip_ratio

    @property
    def clip_range(self) -> tuple[float, float] | None:
        """``(low, high)`` bounds of the importance weight, or ``None`` when unclipped."""
        c = self.clip_ratio
        if c is None:
            return None
        return (1 - c, 1 + c) if c < 1 else (1 / c, c)

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
        weight = ratio.detach()
        bounds = self.clip_range
        if bounds is not None:
            low, high = bounds
            weight = weight.clamp(low, high)
            with torch.no_grad():
                clipped = (ratio > high) | (ratio < low)
                self.last_metrics["clip_frac"] = masked_fraction(clipped, x.valid)
        else:
            self.last_metrics["clip_frac"] = 0.0
        per_token_loss = -weight * x.advantages * x.logprobs + self._kl_penalty(x, "k3")
        loss = aggregate(per_token_loss, x.mask, self.aggregation)
        self._record_ratio(ratio, x.valid)
        return loss

    def extra_repr(self) -> str:
        return f"clip_ratio={self.clip_ratio}, beta={self.beta}"


class SimpleGRPOLoss(PolicyLoss):
    r"""torchforge's simple GRPO loss: one on-policy step, no clipping, k3 KL penalty.

    .. code-block:: text

        ℓ_it = -(exp(log π_θ(o_it) - sg(log π_θ(o_it))) Â_i - β D_it)      (D = k3, value 1·Â, gradient Â ∇log π)
        L    = 1/G Σ_i 1/|o_i| Σ_t ℓ_it                                    (seq-mean-token-mean)

    Matches torchforge's ``SimpleGRPOLoss`` exactly when ``old_logprobs`` is ``None``; given ``old_logprobs``,
    the ratio becomes ``exp(log π_θ - log π_old)`` (unclipped importance sampling). Metrics: ``kl``, ``ratio_*``
    (``clip_frac`` is 0: nothing is clipped).

    Args:
        beta: KL penalty weight; ``ref_logprobs`` are required while it is > 0.
    """

    advantage_weighted = True

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__(beta=beta)

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
        per_token_loss = -(ratio * x.advantages) + self._kl_penalty(x, "k3")
        loss = aggregate(per_token_loss, x.mask, self.aggregation)
        self.last_metrics["clip_frac"] = 0.0
        self._record_ratio(ratio, x.valid)
        return loss
