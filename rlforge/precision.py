"""Compute precision of the policy's logprob forwards: ``32-true`` (fp32) or ``bf16-mixed`` (Lightning's names).

``bf16-mixed`` keeps the parameters, gradients and optimizer state in their dtype (fp32 by default) and runs the
forward under ``torch.autocast(bfloat16)``: GEMMs in bf16 (tensor cores on GPU, AMX on recent Xeons: ~6x fp32 on
the CPU of ``benchmarks/bench_precision.py``), logits cast back to fp32 before any logprob, entropy or loss.
The sampler keeps its own dtype, so a bf16 training forward differs from the sampler's fp32 logprobs by bf16
rounding (~1e-2 at most, measured): the PPO ratio of an on-policy step is exp(±0.01), far inside any clip range.
"""

from __future__ import annotations

import contextlib

import torch

from rlforge.errors import ConfigError

PRECISIONS = ("32-true", "bf16-mixed")


def check_precision(precision: str) -> str:
    """``precision`` if it is one of ``PRECISIONS``, else a ``ConfigError`` naming ``module.precision``."""
    if precision not in PRECISIONS:
        raise ConfigError(
            f"module.precision must be one of {', '.join(PRECISIONS)}, got {precision!r} (fp16 autocast would need "
            "loss scaling, which rlforge does not do; bf16 parameters are module.dtype bfloat16)"
        )
    return precision


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a forward of ``precision`` runs under on ``device`` (a no-op for ``32-true``)."""
    if check_precision(precision) == "32-true":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
