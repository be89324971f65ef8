"""Data types that flow through the RL loop: completions, episodes, groups and padded train batches."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass
class Completion:
    """One sampled response.

    Attributes:
        text: Decoded response text (special tokens removed).
        token_ids: Sampled token ids, including the stop token when one ended the sequence.
        logprobs: The sampler's log-probability of each token in ``token_ids`` (always filled).
        prompt_ids: Token ids of the prompt the response continues (default empty: torchforge's
            ``Completion(text, token_ids, logprobs, metadata)`` leaves it out; the trainer's own samplers fill it).
        stop_reason: ``"stop"`` (a stop token was sampled) or ``"length"`` (``max_new_tokens`` hit).
        policy_version: Version of the weights the sampler used.
        metadata: Free-form extras (e.g. sampler name).
        loss_mask: 1 for tokens the model sampled, 0 for tokens an environment inserted between turns
            (multi-turn episodes); ``None``: every token was sampled.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_ids: list[int] = field(default_factory=list)
    stop_reason: str = "stop"
    policy_version: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    loss_mask: list[int] | None = None

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "length"


@dataclass
class Episode:
    """A completion with everything the update needs: reward, advantage and reference logprobs.

    Multi-turn episodes (``rlforge.envs``) also count their model ``turns`` and ``tool_calls`` and say whether
    the environment judged them a ``success`` (``None`` for single-turn episodes).
    """

    prompt: str
    target: str
    completion: Completion
    reward: float = 0.0
    advantage: float = 0.0
    ref_logprobs: list[float] | None = None
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    turns: int = 1
    tool_calls: int = 0
    success: bool | None = None


Group = list[Episode]
"""The G completions sampled for one prompt."""


@dataclass
class TrainBatch:
    """Padded tensors for one update, laid out ``[left-padded prompt | right-padded response]``.

    ``input_ids``/``attention_mask`` are ``[B, P + T]``; every per-token field is ``[B, T]`` and aligned
    with the response part (``input_ids[:, P:]``), so ``response_mask[b, t]`` marks real response tokens.

    Attributes:
        input_ids: Prompt and response token ids.
        attention_mask: 1 for real tokens, 0 for padding.
        response_mask: 1 for response tokens that count in the loss.
        old_logprobs: Behaviour-policy (sampler) logprobs of the response tokens; ``None`` means on-policy.
        ref_logprobs: Reference-model logprobs, or ``None`` when no KL penalty is used.
        advantages: Per-sequence advantages ``[B]``.
        policy_version: Weight version that sampled each row ``[B]``.
        prompt_len: ``P``, the width of the prompt block.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    policy_version: torch.Tensor
    prompt_len: int

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    def to(self, device: torch.device | str) -> TrainBatch:
        """Moves every tensor to ``device``."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return TrainBatch(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in values.items()})

    def select(self, index: torch.Tensor | slice) -> TrainBatch:
        """Rows ``index`` of the batch (used to cut minibatches)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return TrainBatch(**{k: v[index] if isinstance(v, torch.Tensor) else v for k, v in values.items()})
