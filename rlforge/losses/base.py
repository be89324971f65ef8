"""The contract every rlforge policy loss follows, and the few helpers the loss files share.

A loss is an ``nn.Module`` whose ``forward(logprobs, ref_logprobs, advantages, padding_mask, old_logprobs=None)``
returns a scalar and leaves its diagnostics in ``self.last_metrics``. All shapes are ``[B, T]`` over the response
tokens (``advantages`` may be ``[B]``); ``padding_mask`` is 1 for real tokens. ``old_logprobs=None`` means
on-policy: the importance ratio is ``exp(logprobs - logprobs.detach()) = 1`` and the gradient still flows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlforge.errors import ConfigError
from rlforge.losses.kl import MAX_LOG_RATIO, kl_estimate


@dataclass
class LossInputs:
    """Loss inputs cast to the compute dtype (fp32, or fp64 when any input is fp64), padding zeroed.

    Attributes:
        logprobs: ``log π_θ`` ``[B, T]``, carries the gradient.
        old_logprobs: ``log π_old`` ``[B, T]``, detached (``logprobs.detach()`` when on-policy).
        ref_logprobs: ``log π_ref`` ``[B, T]`` or ``None``.
        advantages: ``[B, 1]`` or ``[B, T]``, detached.
        mask: ``[B, T]`` 0/1 mask in the compute dtype.
        valid: ``[B, T]`` boolean mask.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    ref_logprobs: Tensor | None
    advantages: Tensor
    mask: Tensor
    valid: Tensor

    @property
    def log_ratio(self) -> Tensor:
        """``log π_θ - log π_old`` per token, clamped to ``±MAX_LOG_RATIO`` (ready for ``exp``)."""
        return (self.logprobs - self.old_logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """fp64 when any floating input is fp64, else fp32 (bf16/fp16 are upcast; nothing is ever cast down)."""
    wide = any(t is not None and t.dtype == torch.float64 for t in tensors)
    return torch.float64 if wide else torch.float32


@torch.no_grad()
def masked_stats(values: Tensor, valid: Tensor) -> tuple[float, float, float]:
    """``(mean, min, max)`` of ``values`` where ``valid``; ``(1, 1, 1)`` when nothing is valid (ratio default)."""
    picked = values.expand_as(valid)[valid]
    if picked.numel() == 0:
        return 1.0, 1.0, 1.0
    return picked.mean().item(), picked.min().item(), picked.max().item()


@torch.no_grad()
def masked_fraction(flags: Tensor, valid: Tensor) -> float:
    """Fraction of valid positions where the boolean ``flags`` is set (0 when nothing is valid)."""
    flags = flags.expand_as(valid) & valid
    return flags.sum().item() / max(int(valid.sum().item()), 1)


class PolicyLoss(nn.Module):
    """Base class of rlforge's policy-gradient losses.

    Subclasses implement ``forward`` with the signature below and fill ``self.last_metrics``. ``beta`` is a plain
    mutable float so a KL controller callback can change it between steps.

    Args:
        beta: Weight of the per-token KL penalty against the reference policy (0 disables it).

    Attributes:
        aggregation: The ``rlforge.losses.aggregation`` mode ``forward`` normalises with; data-parallel training
            reads it to weigh each rank's loss so the update equals one process on the whole batch.
        max_len: Constant length normaliser of ``seq-mean-token-sum-norm`` (``None``: the padded width).
        advantage_weighted: Every per-token term but the KL penalty is multiplied by the advantage, so with
            ``beta == 0`` a row whose advantages are all 0 adds exactly nothing to the gradient (True for every
            built-in loss; ``GRPOModule(skip_zero_advantage=True)`` then leaves such rows out of the update). A
            subclass of a built-in that adds a term without the advantage (an auxiliary loss) must set it to False.
    """

    aggregation: str = "seq-mean-token-mean"
    max_len: int | None = None
    advantage_weighted: bool = False

    def __init__(self, beta: float = 0.0) -> None:
        super().__init__()
        if beta < 0:
            raise ConfigError(f"beta={beta} must be >= 0 (it weights the KL penalty)")
        self.beta = float(beta)
        self.last_metrics: dict[str, float] = {}

    def forward(
        self,
        logprobs: Tensor,
        ref_logprobs: Tensor | None,
        advantages: Tensor,
        padding_mask: Tensor,
        old_logprobs: Tensor | None = None,
    ) -> Tensor:
        """Returns the scalar loss.

        Args:
            logprobs: ``log π_θ`` of the response tokens ``[B, T]`` (requires grad).
            ref_logprobs: ``log π_ref`` ``[B, T]``; may be ``None`` when ``beta == 0``.
            advantages: Per-sequence ``[B]`` or per-token ``[B, T]`` advantages.
            padding_mask: ``[B, T]``, 1 for real response tokens, 0 for padding.
            old_logprobs: ``log π_old`` (the sampler's logprobs) ``[B, T]``; ``None`` means on-policy.
        """
        raise NotImplementedError

    def _prepare(
        self,
        logprobs: Tensor,
        ref_logprobs: Tensor | None,
        advantages: Tensor,
        padding_mask: Tensor,
        old_logprobs: Tensor | None,
    ) -> LossInputs:
        """Checks shapes, upcasts to the compute dtype and zeroes padded positions (NaN-safe)."""
        self.last_metrics = {}
        if logprobs.dim() != 2 or padding_mask.shape != logprobs.shape:
            raise ValueError(
                f"logprobs and padding_mask must both be [B, T]; got {tuple(logprobs.shape)} "
                f"and {tuple(padding_mask.shape)}"
            )
        dtype = compute_dtype(logprobs, old_logprobs, ref_logprobs, advantages)
        valid = padding_mask != 0
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)
        if advantages.shape not in ((logprobs.shape[0], 1), logprobs.shape):
            raise ValueError(f"advantages must be [B] or [B, T]; got {tuple(advantages.shape)}")

        def clean(t: Tensor) -> Tensor:
            return torch.where(valid, t.to(dtype), 0.0)

        lp = clean(logprobs)
        old = lp.detach() if old_logprobs is None else clean(old_logprobs).detach()
        ref = None if ref_logprobs is None else clean(ref_logprobs).detach()
        adv = advantages.detach().to(dtype)
        return LossInputs(lp, old, ref, adv, valid.to(dtype), valid)

    def _kl_penalty(self, x: LossInputs, estimator: str = "k3", ratio: Tensor | None = None) -> Tensor | float:
        """``beta · KL`` per token (times ``ratio`` when given); records ``kl`` in ``self.last_metrics``.

        ``kl`` is recorded only when it was measured (``ref_logprobs`` given): an unmeasured KL is absent, not 0.

        Raises:
            ConfigError: ``beta > 0`` but no ``ref_logprobs`` were passed.
        """
        if x.ref_logprobs is None:
            if self.beta > 0:
                raise ConfigError(
                    f"{type(self).__name__}.beta={self.beta} > 0 needs ref_logprobs; pass the reference "
                    "model's logprobs or set beta=0"
                )
            return 0.0
        with torch.set_grad_enabled(self.beta > 0 and torch.is_grad_enabled()):
            kl = kl_estimate(estimator, x.logprobs, x.ref_logprobs)
        self.last_metrics["kl"] = (kl.detach() * x.mask).sum().item() / max(x.mask.sum().item(), 1.0)
        if self.beta == 0:
            return 0.0  # measured only
        if ratio is not None:
            kl = kl * ratio
        return self.beta * kl

    def _record_ratio(self, ratio: Tensor, valid: Tensor) -> None:
        """Stores ``ratio_mean``/``ratio_min``/``ratio_max`` over the valid positions."""
        mean, low, high = masked_stats(ratio.detach(), valid)
        self.last_metrics.update(ratio_mean=mean, ratio_min=low, ratio_max=high)

    def extra_repr(self) -> str:
        return f"beta={self.beta}"
