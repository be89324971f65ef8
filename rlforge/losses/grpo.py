"""GRPO: PPO's clipped surrogate with group-relative advantages and a per-token KL penalty."""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.losses.aggregation import aggregate, check_aggregation
from rlforge.losses.base import LossInputs, PolicyLoss, masked_fraction
from rlforge.losses.kl import check_kl_estimator


class GRPOLoss(PolicyLoss):
    r"""Group Relative Policy Optimization loss (Shao et al. 2024, DeepSeekMath).

    .. code-block:: text

        r_it  = π_θ(o_it | q, o_i<t) / π_old(o_it | q, o_i<t)
        ℓ_it  = -min(r_it Â_it, clip(r_it, 1 - ε_low, 1 + ε_high) Â_it) + β D_it
        D_it  = π_ref/π_θ - log(π_ref/π_θ) - 1                 (k3; ``kl_estimator`` picks k1/k2/k3)
        L     = 1/G Σ_i 1/|o_i| Σ_t ℓ_it                        (``aggregation="seq-mean-token-mean"``)

    Options: ``dual_clip=c`` (Ye et al. 2020, dual-clip PPO) caps the loss of negative-advantage tokens at
    ``-c Â_it``, i.e. ``ℓ_it = min(ℓ_it, -c Â_it)`` when ``Â_it < 0`` (TRL's ``delta`` gives the same loss for
    ``c > 1 + ε_high``); ``kl_times_ratio=True`` uses ``r_it · D_it`` (DeepSeek-V3.2, TRL's
    ``use_bias_correction_kl``), whose gradient is the unbiased gradient of KL(π_θ ‖ π_ref).

    Metrics: ``clip_frac`` (tokens whose ratio left the trust region on the side that zeroes the gradient),
    ``clip_frac_low``, ``clip_frac_high``, ``kl``, ``ratio_mean``, ``ratio_min``, ``ratio_max``.

    Args:
        clip_low: ``ε_low``; the ratio is clipped below at ``1 - clip_low``.
        clip_high: ``ε_high``; the ratio is clipped above at ``1 + clip_high``.
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        kl_estimator: ``"k1"``, ``"k2"`` or ``"k3"`` (see ``rlforge.losses.kl``).
        aggregation: One of ``rlforge.losses.aggregation.AGGREGATION_MODES``.
        dual_clip: Dual-clip constant ``c > 1`` for negative advantages; ``None`` disables it.
        kl_times_ratio: Multiply the per-token KL by the (differentiable) importance ratio.
    """

    advantage_weighted = True

    def __init__(
        self,
        clip_low: float = 0.2,
        clip_high: float = 0.2,
        beta: float = 0.0,
        kl_estimator: str = "k3",
        aggregation: str = "seq-mean-token-mean",
        dual_clip: float | None = None,
        kl_times_ratio: bool = False,
    ) -> None:
        super().__init__(beta=beta)
        if not 0 <= clip_low < 1 or clip_high < 0:
            raise ConfigError(f"clip_low={clip_low} must be in [0, 1) and clip_high={clip_high} must be >= 0")
        if dual_clip is not None and dual_clip <= 1:
            raise ConfigError(f"dual_clip={dual_clip} must be > 1 (Ye et al. use 3), or None to disable it")
        check_kl_estimator(kl_estimator)
        check_aggregation(aggregation)
        self.clip_low = clip_low
        self.clip_high = clip_high
        self.kl_estimator = kl_estimator
        self.aggregation = aggregation
        self.dual_clip = dual_clip
        self.kl_times_ratio = kl_times_ratio
        self.max_len: int | None = None  # constant normaliser of "seq-mean-token-sum-norm" (Dr.GRPO sets it)

    def forward(
        self,
        logprobs: Tensor,
        ref_logprobs: Tensor | None,
        advantages: Tensor,
        padding_mask: Tensor,
        old_logprobs: Tensor | None = None,
    ) -> Tensor:
        x = self._prepare(logprobs, ref_logprobs, advantages, padding_mask, old_logprobs)
        adv = x.advantages
        ratio = torch.exp(x.log_ratio)
        clipped_ratio = torch.clamp(ratio, 1 - self.clip_low, 1 + self.clip_high)
        per_token_loss = -torch.min(ratio * adv, clipped_ratio * adv)
        if self.dual_clip is not None:
            per_token_loss = torch.where(adv < 0, torch.min(per_token_loss, -self.dual_clip * adv), per_token_loss)
        kl_ratio = ratio if self.kl_times_ratio else None
        per_token_loss = per_token_loss + self._kl_penalty(x, self.kl_estimator, kl_ratio)
        loss = aggregate(per_token_loss, x.mask, self.aggregation, self.max_len)
        self._record(x, ratio)
        return loss

    @torch.no_grad()
    def _record(self, x: LossInputs, ratio: Tensor) -> None:
        adv = x.advantages
        low = (ratio < 1 - self.clip_low) & (adv < 0)
        high = (ratio > 1 + self.clip_high) & (adv > 0)
        self.last_metrics.update(
            clip_frac=masked_fraction(low | high, x.valid),
            clip_frac_low=masked_fraction(low, x.valid),
            clip_frac_high=masked_fraction(high, x.valid),
        )
        if self.dual_clip is not None:
            self.last_metrics["dual_clip_frac"] = masked_fraction((ratio > self.dual_clip) & (adv < 0), x.valid)
        self._record_ratio(ratio, x.valid)

    def extra_repr(self) -> str:
        return (
            f"clip_low={self.clip_low}, clip_high={self.clip_high}, beta={self.beta}, "
            f"kl_estimator={self.kl_estimator!r}, aggregation={self.aggregation!r}"
        )
