"""DAPO's loss: decoupled (asymmetric) clipping and a token-level mean over the whole batch."""

from __future__ import annotations

from rlforge.losses.grpo import GRPOLoss


class DAPOLoss(GRPOLoss):
    r"""Decoupled Clip and Dynamic sAmpling Policy Optimization loss (Yu et al. 2025).

    .. code-block:: text

        r_it = π_θ(o_it) / π_old(o_it)
        ℓ_it = -min(r_it Â_it, clip(r_it, 1 - ε_low, 1 + ε_high) Â_it) + β D_it      (D = k3; DAPO uses β = 0)
        L    = 1/(Σ_i |o_i|) Σ_i Σ_t ℓ_it                                            (token-level mean)

    "Clip-Higher" is ``ε_high > ε_low`` (0.28 vs 0.2). The data-side parts of DAPO (dynamic sampling, overlong
    reward shaping, truncated-sample masking) live in ``rlforge.shaping``. Metrics as ``GRPOLoss``.

    The token mean is over the batch passed to ``forward``; TRL divides by the token count of the whole
    generation batch (``num_items_in_batch``), which is the same when one ``forward`` sees the whole batch.

    Args:
        clip_low: ``ε_low``; the ratio is clipped below at ``1 - clip_low``.
        clip_high: ``ε_high``; the ratio is clipped above at ``1 + clip_high``.
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        kl_times_ratio: Multiply the per-token KL by the importance ratio (TRL's ``use_bias_correction_kl``).
    """

    def __init__(
        self, clip_low: float = 0.2, clip_high: float = 0.28, beta: float = 0.0, kl_times_ratio: bool = False
    ) -> None:
        super().__init__(
            clip_low=clip_low,
            clip_high=clip_high,
            beta=beta,
            aggregation="token-mean",
            kl_times_ratio=kl_times_ratio,
        )
