"""How a ``[B, T]`` per-token loss becomes one scalar: the normaliser is what separates GRPO, Dr.GRPO and DAPO.

=========================== ==================================================== ====================
mode                        formula (``m`` = mask, ``n_i = Σ_t m_it``)           used by
=========================== ==================================================== ====================
``token-mean``              ``Σ_i Σ_t m_it L_it / Σ_i n_i``                      DAPO, CISPO
``seq-mean-token-mean``     ``1/B Σ_i (Σ_t m_it L_it / n_i)``                    GRPO, GSPO, SAPO
``seq-mean-token-sum``      ``1/B Σ_i Σ_t m_it L_it``                            (sequence-sum PG)
``seq-mean-token-sum-norm`` ``1/B Σ_i Σ_t m_it L_it / max_len`` (default ``T``)  Dr.GRPO
=========================== ==================================================== ====================

Empty rows (``n_i = 0``) count ``0`` and never produce NaN (denominators are clamped to >= 1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.errors import ConfigError

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def check_aggregation(mode: str) -> None:
    """Raises ``ConfigError`` unless ``mode`` is one of ``AGGREGATION_MODES``."""
    if mode not in AGGREGATION_MODES:
        raise ConfigError(f"aggregation={mode!r} is unknown; choose one of {', '.join(AGGREGATION_MODES)}")


def aggregate(per_token_loss: Tensor, mask: Tensor, mode: str, max_len: int | None = None) -> Tensor:
    """Reduces a per-token loss to a scalar over the tokens where ``mask`` is 1.

    Args:
        per_token_loss: ``[B, T]`` loss per token (values at masked positions are ignored).
        mask: ``[B, T]``, 1 for real response tokens, 0 for padding.
        mode: One of ``AGGREGATION_MODES``.
        max_len: Constant length normaliser of ``seq-mean-token-sum-norm``; ``None`` uses ``T``.

    Raises:
        ConfigError: ``mode`` is unknown.
    """
    check_aggregation(mode)
    if max_len is not None and max_len < 1:
        raise ConfigError(f"max_len={max_len} must be >= 1 (or None to use the padded width T)")
    mask = mask.to(per_token_loss.dtype)
    # `where` keeps NaN/inf sitting under padding out of the sum (and out of the gradient).
    masked = torch.where(mask != 0, per_token_loss * mask, 0.0)
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    token_sums = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        return (token_sums / mask.sum(dim=-1).clamp(min=1.0)).mean()
    if mode == "seq-mean-token-sum":
        return token_sums.mean()
    horizon = mask.shape[-1] if max_len is None else max_len
    return token_sums.sum() / (mask.shape[0] * horizon)
