"""Per-token log-probabilities and entropies of responses under a causal LM."""

from __future__ import annotations

import torch
from torch import nn


def response_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int
) -> torch.Tensor:
    """Logits that predict each response token, ``[B, T, V]`` in fp32.

    The batch is laid out ``[left-padded prompt | right-padded response]``; positions follow the
    attention mask so left padding does not shift RoPE positions (the sampler does the same).
    """
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.logits[:, prompt_len - 1 : -1, :].float()


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / temperature)`` at ``token_ids`` without materialising all logprobs."""
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    picked = logits.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of ``softmax(logits / temperature)`` at each position, ``[B, T]``."""
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def compute_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Response-token logprobs ``[B, T]`` (and entropies) from one forward pass."""
    logits = response_logits(model, input_ids, attention_mask, prompt_len)
    targets = input_ids[:, prompt_len:]
    logprobs = token_logprobs(logits, targets, temperature)
    entropy = token_entropy(logits, temperature) if with_entropy else None
    return logprobs, entropy
