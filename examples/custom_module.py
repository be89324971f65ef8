"""A whole RL algorithm as an ``RLModule``: leave-one-out REINFORCE (RLOO) in ~60 lines, no infrastructure.

The trainer still samples, syncs weights, validates and checkpoints; the module only says how to score,
how to turn rewards into advantages, and what the loss is. Run it (from the repository root)::

    rlforge fit --module examples.custom_module.RLOOModule --module.init_args.group_size 4
"""

from __future__ import annotations

import dataclasses

import torch

from rlforge import PolicyModule, SamplingParams
from rlforge.models import DEFAULT_POLICY, compute_logprobs
from rlforge.rewards import MathReward
from rlforge.types import Group, TrainBatch


class RLOOModule(PolicyModule):
    """REINFORCE with a leave-one-out baseline: ``A_i = r_i - mean_{j != i} r_j``, loss ``-A_i · Σ_t log π(o_it)``.

    Args:
        model: Policy name or folder.
        group_size: Samples per prompt (>= 2 for the leave-one-out baseline).
        max_new_tokens: Response length cap.
        lr: AdamW learning rate.
    """

    def __init__(
        self, model: str = DEFAULT_POLICY, group_size: int = 8, max_new_tokens: int = 8, lr: float = 1e-4
    ) -> None:
        super().__init__(model=model, lr=lr)
        if group_size < 2:
            raise ValueError("RLOOModule needs group_size >= 2 for a leave-one-out baseline")
        self.group_size = group_size
        self.sampling = SamplingParams(max_new_tokens=max_new_tokens, n=group_size)
        self.val_sampling = dataclasses.replace(self.sampling, n=1, temperature=0.0)
        self.reward = MathReward()

    def score(self, groups: list[Group]) -> dict[str, float]:
        for group in groups:
            for ep in group:
                ep.reward = self.reward(ep.prompt, ep.completion.text, ep.target)
        return {}

    def compute_advantages(self, groups: list[Group]) -> None:
        for group in groups:
            total = sum(ep.reward for ep in group)
            for ep in group:
                ep.advantage = ep.reward - (total - ep.reward) / (len(group) - 1)

    def training_step(self, batch: TrainBatch) -> torch.Tensor:
        logprobs, _ = compute_logprobs(self.policy, batch.input_ids, batch.attention_mask, batch.prompt_len)
        seq_logprob = (logprobs * batch.response_mask).sum(-1)
        loss = -(batch.advantages * seq_logprob).mean()
        self.log("train/seq_logprob", seq_logprob.mean())
        return loss

    def is_correct(self, prompt: str, response: str, target: str) -> bool:
        return self.reward(prompt, response, target) == 1.0
