"""The seed's custom loss, verbatim: a plain ``nn.Module`` with a 4-argument ``forward``.

It is not a ``PolicyLoss``: ``GRPOModule`` calls it with ``logprobs``, ``ref_logprobs`` (the reference model's
real logprobs: the reference runs for such a loss), ``advantages`` as ``[B, 1]`` (so ``ratio * advantages``
broadcasts over the tokens) and ``padding_mask``; no ``old_logprobs``, since ``forward`` does not take them.
See ``rlforge.losses.call``. Run it (from the repository root)::

    rlforge fit --config configs/seed_custom_loss.yaml
"""

import torch
import torch.nn as nn


# The seed's code, verbatim (kept out of the formatter).
# fmt: off
class CustomLoss(nn.Module):
    def __init__(self, clip_range: float = 0.2, beta: float = 0.1):
        super().__init__()
        self.clip_range = clip_range
        self.beta = beta

    def forward(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, advantages: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:  # noqa: E501
        ratio = torch.exp(logprobs - ref_logprobs)
        clipped_ratio = torch.clamp(ratio, 1 - self.clip_range, 1 + self.clip_range)
        pg_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
        kl = ref_logprobs - logprobs
        masked_loss = (pg_loss + self.beta * kl) * padding_mask
        loss = masked_loss.sum() / padding_mask.sum()
        return loss


# fmt: on
