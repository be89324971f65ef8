"""Dr.GRPO: GRPO without the per-sequence length normaliser (and, data side, without the std division)."""

from __future__ import annotations

from rlforge.errors import ConfigError
from rlforge.losses.grpo import GRPOLoss


class DrGRPOLoss(GRPOLoss):
    r"""GRPO Done Right (Liu et al. 2025, "Understanding R1-Zero-Like Training").

    .. code-block:: text

        r_it = π_θ(o_it) / π_old(o_it)
        ℓ_it = -min(r_it Â_it, clip(r_it, 1 - ε_low, 1 + ε_high) Â_it) + β D_it      (D = k3)
        L    = 1/(G · L_max) Σ_i Σ_t ℓ_it                                            (no 1/|o_i|)

    The constant ``L_max`` (``max_response_len``; TRL's ``max_completion_length``) replaces GRPO's ``1/|o_i|``,
    removing the length bias; pair it with ``compute_advantages(method="drgrpo")`` (no std division).
    Metrics as ``GRPOLoss``.

    Args:
        clip_low: ``ε_low``; the ratio is clipped below at ``1 - clip_low``.
        clip_high: ``ε_high``; the ratio is clipped above at ``1 + clip_high``.
        beta: KL penalty weight (0 disables the penalty and the need for ``ref_logprobs``).
        max_response_len: The constant ``L_max``; ``None`` uses ``T``, the padded width of each batch (keep it
            fixed across steps, e.g. the generation ``max_new_tokens``, to reproduce the paper).
        kl_times_ratio: Multiply the per-token KL by the importance ratio (TRL's ``use_bias_correction_kl``).
    """

    def __init__(
        self,
        clip_low: float = 0.2,
        clip_high: float = 0.2,
        beta: float = 0.0,
        max_response_len: int | None = None,
        kl_times_ratio: bool = False,
    ) -> None:
        if max_response_len is not None and max_response_len < 1:
            raise ConfigError(f"max_response_len={max_response_len} must be >= 1, or None to use the padded width")
        super().__init__(
            clip_low=clip_low,
            clip_high=clip_high,
            beta=beta,
            aggregation="seq-mean-token-sum-norm",
            kl_times_ratio=kl_times_ratio,
        )
        self.max_response_len = max_response_len
        self.max_len = max_response_len
