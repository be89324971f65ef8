"""SAPO: a smooth, temperature-controlled sigmoid gate on the ratio instead of a hard clip."""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.losses.aggregation import aggregate
from rlforge.losses.base import PolicyLoss, masked_stats


class SAPOLoss(PolicyLoss):
    r"""Soft Adaptive Policy Optimization (Qwen, 2025, arXiv:2511.20347).

    .. code-block:: text

        r_it = π_θ(o_it) / π_old(o_it)
        τ_it = τ_pos if Â_it > 0 else τ_neg
        f(r) = σ(τ_it (r - 1)) · 4 / τ_it
        ℓ_it = -f(r_it) Â_it + β D_it                       (D = k3)
        L    = 1/G Σ_i 1/|o_i| Σ_t ℓ_it                     (seq-mean-token-mean)

    The gradient weight is ``f'(r) r = 4 σ(1 - σ) r``: 1 at ``r = 1`` (on-policy SAPO has REINFORCE's gradient)
    and decaying smoothly off-policy. The value at ``r = 1`` is ``f(1) = 2/τ``, so on-policy the loss equals
    REINFORCE's surrogate ``-Â`` scaled by ``2/τ_it`` per token. Metrics: ``gate_mean`` (mean gradient weight
    ``4 σ(1-σ) r`` over valid tokens), ``kl``, ``ratio_*``; there is no hard clip, so no ``clip_frac``.

    Args:
        tau_pos: Temperature of tokens with positive advantage.
        tau_neg: Temperature of tokens with non-positive advantage (a bit larger: faster decay).
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        kl_times_ratio: Multiply the per-token KL by the importance ratio (TRL's ``use_bias_correction_kl``).
    """

    advantage_weighted = True

    def __init__(
        self, tau_pos: float = 1.0, tau_neg: float = 1.05, beta: float = 0.0, kl_times_ratio: bool = False
    ) -> None:
        super().__init__(beta=beta)
        if tau_pos <= 0 or tau_neg <= 0:
            raise ConfigError(f"tau_pos={tau_pos} and tau_neg={tau_neg} must both be > 0")
        self.tau_pos = tau_pos
        self.tau_neg = tau_neg
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
        adv = x.advantages
        ratio = torch.exp(x.log_ratio)
        tau = torch.where(adv > 0, adv.new_tensor(self.tau_pos), adv.new_tensor(self.tau_neg))  # compute dtype
        gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
        per_token_loss = -gate * adv
        per_token_loss = per_token_loss + self._kl_penalty(x, "k3", ratio if self.kl_times_ratio else None)
        loss = aggregate(per_token_loss, x.mask, self.aggregation)
        with torch.no_grad():
            sig = torch.sigmoid(tau * (ratio - 1))
            self.last_metrics["gate_mean"] = masked_stats(4 * sig * (1 - sig) * ratio, x.valid)[0]
        self._record_ratio(ratio, x.valid)
        return loss

    def extra_repr(self) -> str:
        return f"tau_pos={self.tau_pos}, tau_neg={self.tau_neg}, beta={self.beta}"
