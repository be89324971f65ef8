"""GSPO: one length-normalised importance ratio per sequence, clipped at the sequence level."""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.losses.aggregation import aggregate
from rlforge.losses.base import PolicyLoss, masked_fraction
from rlforge.losses.kl import MAX_LOG_RATIO


class GSPOLoss(PolicyLoss):
    r"""Group Sequence Policy Optimization (Zheng et al. 2025, Qwen, arXiv:2507.18071).

    .. code-block:: text

        s_i = (π_θ(o_i) / π_old(o_i))^(1/|o_i|) = exp(1/|o_i| Σ_t log(π_θ(o_it) / π_old(o_it)))
        L   = -1/G Σ_i min(s_i Â_i, clip(s_i, 1 - ε_low, 1 + ε_high) Â_i)  [+ β/G Σ_i 1/|o_i| Σ_t D_it]

    ``log s_i`` is clamped to ±20 before ``exp``. Per-token advantages ``[B, T]`` are allowed (the sequence ratio
    multiplies each token's advantage, then tokens are averaged per sequence, like TRL's
    ``importance_sampling_level="sequence"``). The clip range is tiny (3e-4/4e-4 in the paper) because ``s_i``
    is a geometric mean. Metrics: ``clip_frac`` (valid tokens whose sequence ratio was clipped), ``kl``, and
    ``ratio_*`` over the sequence ratios of non-empty sequences.

    Args:
        clip_low: ``ε_low``; ``s_i`` is clipped below at ``1 - clip_low``.
        clip_high: ``ε_high``; ``s_i`` is clipped above at ``1 + clip_high``.
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        kl_times_ratio: Multiply the per-token KL by ``s_i`` (TRL's ``use_bias_correction_kl``).
    """

    advantage_weighted = True

    def __init__(
        self, clip_low: float = 3e-4, clip_high: float = 4e-4, beta: float = 0.0, kl_times_ratio: bool = False
    ) -> None:
        super().__init__(beta=beta)
        if not 0 <= clip_low < 1 or clip_high < 0:
            raise ConfigError(f"clip_low={clip_low} must be in [0, 1) and clip_high={clip_high} must be >= 0")
        self.clip_low = clip_low
        self.clip_high = clip_high
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
        lengths = x.mask.sum(dim=-1, keepdim=True)
        log_s = ((x.logprobs - x.old_logprobs) * x.mask).sum(dim=-1, keepdim=True) / lengths.clamp(min=1.0)
        s = torch.exp(log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # [B, 1]
        adv = x.advantages
        clipped_s = torch.clamp(s, 1 - self.clip_low, 1 + self.clip_high)
        per_token_loss = -torch.min(s * adv, clipped_s * adv)
        per_token_loss = per_token_loss + self._kl_penalty(x, "k3", s if self.kl_times_ratio else None)
        loss = aggregate(per_token_loss, x.mask, self.aggregation)
        with torch.no_grad():
            clipped = ((s < 1 - self.clip_low) & (adv < 0)) | ((s > 1 + self.clip_high) & (adv > 0))
            self.last_metrics["clip_frac"] = masked_fraction(clipped, x.valid)
        self._record_ratio(s, lengths > 0)
        return loss

    def extra_repr(self) -> str:
        return f"clip_low={self.clip_low}, clip_high={self.clip_high}, beta={self.beta}"
