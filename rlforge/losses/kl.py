"""Per-token estimators of KL(π_θ ‖ π_ref) from sampled-token logprobs (Schulman, "Approximating KL divergence").

With tokens sampled from π_θ and ``log r = log π_ref(x) - log π_θ(x)``:

- ``k1 = -log r``                 unbiased, high variance, can be negative.
- ``k2 = ½ (log r)²``             biased, low variance, always >= 0.
- ``k3 = (r - 1) - log r``        unbiased, low variance, always >= 0 (the GRPO paper's estimator).

What each gives as a *loss* (gradient through ``log π_θ(x)`` with the samples held fixed), in expectation
under π_θ: ``∇k1 -> 0``, ``∇k2 -> ∇ KL(π_θ ‖ π_ref)``, ``∇k3 -> ∇ KL(π_ref ‖ π_θ)``, and
``∇(ratio · k3) -> ∇ KL(π_θ ‖ π_ref)`` when ``ratio = exp(log π_θ - sg(log π_θ))``
(checked exactly in ``tests/losses/test_loss_kl.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlforge.errors import ConfigError

MAX_LOG_RATIO = 20.0
"""Every log-ratio is clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` before ``exp`` (no inf/NaN)."""

KL_ESTIMATORS = ("k1", "k2", "k3")


def k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k1 = log π_θ(x) - log π_ref(x)``, per token.

    Args:
        logprobs: ``log π_θ`` of the sampled tokens, ``[B, T]``.
        ref_logprobs: ``log π_ref`` of the same tokens, ``[B, T]``.
    """
    return logprobs - ref_logprobs


def k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k2 = ½ (log π_ref(x) - log π_θ(x))²``, per token.

    Args:
        logprobs: ``log π_θ`` of the sampled tokens, ``[B, T]``.
        ref_logprobs: ``log π_ref`` of the same tokens, ``[B, T]``.
    """
    return 0.5 * (ref_logprobs - logprobs) ** 2


def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k3 = r - log r - 1`` with ``r = π_ref(x) / π_θ(x)``, per token (``log r`` clamped to ±20 first).

    Args:
        logprobs: ``log π_θ`` of the sampled tokens, ``[B, T]``.
        ref_logprobs: ``log π_ref`` of the same tokens, ``[B, T]``.
    """
    log_r = (ref_logprobs - logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1


_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": k1, "k2": k2, "k3": k3}


def kl_estimate(name: str, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token KL estimate by estimator name.

    Args:
        name: One of ``"k1"``, ``"k2"``, ``"k3"``.
        logprobs: ``log π_θ`` of the sampled tokens, ``[B, T]``.
        ref_logprobs: ``log π_ref`` of the same tokens, ``[B, T]``.

    Raises:
        ConfigError: ``name`` is not a known estimator.
    """
    check_kl_estimator(name)
    return _ESTIMATORS[name](logprobs, ref_logprobs)


def check_kl_estimator(name: str) -> None:
    """Raises ``ConfigError`` unless ``name`` is one of ``KL_ESTIMATORS``."""
    if name not in _ESTIMATORS:
        raise ConfigError(f"kl_estimator={name!r} is unknown; choose one of {', '.join(KL_ESTIMATORS)}")
