"""A user-defined loss in ~40 lines: clipped policy gradient + k3 KL, dropped into GRPOModule from YAML.

Run it (from the repository root)::

    rlforge fit --config configs/custom_loss.yaml

or from Python::

    from examples.custom_loss import ClippedPGWithKL
    module = GRPOModule(loss=ClippedPGWithKL(clip=0.2, beta=0.02))

The only contract: ``forward(logprobs, ref_logprobs, advantages, padding_mask, old_logprobs=None)``
returns a scalar, and ``last_metrics`` holds what you want logged as ``train/<name>``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlforge.losses import PolicyLoss


class ClippedPGWithKL(PolicyLoss):
    """``-min(r·A, clip(r, 1±ε)·A) + β·k3``, averaged over each response's tokens, then over the batch.

    Args:
        clip: PPO clip range ε.
        beta: KL penalty weight (needs a reference model when > 0; the trainer builds one).
    """

    def __init__(self, clip: float = 0.2, beta: float = 0.02) -> None:
        super().__init__(beta=beta)
        self.clip = clip

    def forward(self, logprobs, ref_logprobs, advantages, padding_mask, old_logprobs=None) -> Tensor:
        mask = padding_mask.float()
        old = logprobs.detach() if old_logprobs is None else old_logprobs
        ratio = torch.exp((logprobs - old).clamp(-20, 20))
        adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
        per_token = -torch.min(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv)
        kl = torch.zeros_like(logprobs)
        if self.beta > 0:
            delta = (ref_logprobs - logprobs).clamp(-20, 20)
            kl = torch.exp(delta) - delta - 1  # k3: unbiased, non-negative estimate of KL(pi || pi_ref)
            per_token = per_token + self.beta * kl
        tokens = mask.sum(-1).clamp(min=1)
        loss = ((per_token * mask).sum(-1) / tokens).mean()
        with torch.no_grad():
            n = mask.sum().clamp(min=1)
            clipped = ((ratio - 1).abs() > self.clip).float()
            self.last_metrics = {
                "kl": float((kl * mask).sum() / n),
                "clip_frac": float((clipped * mask).sum() / n),
            }
        return loss
