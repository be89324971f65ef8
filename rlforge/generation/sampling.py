"""Token sampling as pure tensor functions: no host syncs and no RNG calls inside, so a decode step that
samples can be compiled into one graph (and captured by CUDA graphs).

Randomness comes from uniforms drawn up front (``draw_uniforms``, one call per ``generate``), which keeps the
token stream a function of the generator's seed and RNG state alone.
"""

from __future__ import annotations

import torch

# Scaling every uniform by (1 - 2^-23) keeps u * total strictly below the CDF's last entry after fp32
# rounding, so the inverse-CDF draw can never land past the end or on a zero-probability token.
_BELOW_ONE = 1.0 - 2.0**-23


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Masks logits outside the top-k set and the top-p nucleus with ``-inf``."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the mass before it already reaches top_p; the first token always stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def draw_uniforms(steps: int, batch: int, rng: torch.Generator, device: torch.device) -> torch.Tensor:
    """The ``[steps, batch]`` uniforms in ``[0, 1)`` that ``sample_tokens`` turns into tokens."""
    return torch.rand((steps, batch), generator=rng, device=device).mul_(_BELOW_ONE)


def sample_tokens(
    logits: torch.Tensor, uniforms: torch.Tensor | None, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its logprob under ``softmax(logits / temperature)`` (before top-k/top-p).

    The draw is an inverse CDF: token ``i`` is the first whose cumulative probability exceeds
    ``u * total``; one uniform per row instead of the ``B x V`` exponentials ``torch.multinomial`` draws.

    Args:
        logits: ``[B, V]`` fp32 logits.
        uniforms: ``[B]`` values from ``draw_uniforms`` (unused when ``temperature == 0``: greedy).
        temperature: Softmax temperature; 0 picks the argmax.
        top_k: Keep only the k most likely tokens (0 disables).
        top_p: Nucleus mass in (0, 1].

    Returns:
        ``(tokens [B] long, logprobs [B] fp32)``.
    """
    scaled = logits if temperature in (0.0, 1.0) else logits / temperature
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
    if temperature == 0.0 or uniforms is None:
        tok = scaled.argmax(-1, keepdim=True)
    else:
        if top_k > 0 or top_p < 1.0:
            probs = filter_logits(scaled, top_k, top_p).softmax(-1)
        else:
            probs = (scaled - lse).exp()
        cdf = probs.cumsum(-1)
        tok = torch.searchsorted(cdf, uniforms[:, None] * cdf[:, -1:], right=True)
    return tok.squeeze(-1), (scaled.gather(-1, tok) - lse).squeeze(-1)
