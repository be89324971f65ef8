"""Adapter from torchforge's dict batches (``train_step(inputs, targets)``) to ``TrainBatch``."""

from __future__ import annotations

from typing import Any

import torch

from rlforge.errors import ConfigError
from rlforge.types import TrainBatch


def batch_from_dicts(
    inputs: dict[str, torch.Tensor], targets: dict[str, torch.Tensor], pad_token_id: int
) -> TrainBatch:
    """Builds a ``TrainBatch`` from ``{"tokens"}`` and ``{"response", "ref_logprobs", "advantages", "padding_mask"}``.

    The prompt block is ``tokens[:, :P]`` with ``P = tokens.shape[1] - response.shape[1]``; prompt padding
    is recognised by ``pad_token_id``; the response padding by ``padding_mask``.
    """
    for key in ("response", "advantages", "padding_mask"):
        if key not in targets:
            raise ConfigError(f"train_step: targets is missing {key!r}")
    if "tokens" not in inputs:
        raise ConfigError("train_step: inputs is missing 'tokens'")
    tokens, response = inputs["tokens"], targets["response"]
    prompt_len = tokens.shape[1] - response.shape[1]
    if prompt_len < 1 or not torch.equal(tokens[:, prompt_len:], response):
        raise ConfigError("train_step: inputs['tokens'] must end with targets['response'] ([prompt | response])")
    mask = targets["padding_mask"].to(torch.float32)
    attention_mask = torch.cat([(tokens[:, :prompt_len] != pad_token_id).long(), mask.long()], dim=1)
    advantages = targets["advantages"].reshape(tokens.shape[0], -1)
    return TrainBatch(
        input_ids=tokens,
        attention_mask=attention_mask,
        response_mask=mask,
        old_logprobs=targets.get("old_logprobs"),
        ref_logprobs=targets.get("ref_logprobs"),
        advantages=advantages[:, 0] if advantages.shape[1] == 1 else advantages,
        policy_version=torch.zeros(tokens.shape[0], dtype=torch.long),
        prompt_len=prompt_len,
    )


def train_step(trainer: Any, inputs: list[dict[str, torch.Tensor]], targets: list[dict[str, torch.Tensor]]) -> float:
    """``RLTrainer.train_step``: one optimizer step over dict micro-batches; returns the mean loss."""
    module, optimizer = trainer.module, trainer.optimizer
    if module is None or optimizer is None:
        raise RuntimeError("train_step() needs a prepared module: call trainer.prepare(module) first")
    pad = module.tokenizer.pad_token_id
    batches = [batch_from_dicts(i, t, pad) for i, t in zip(inputs, targets, strict=True)]
    module.policy.train()
    total = 0.0
    for batch in batches:
        loss = module.training_step(batch.to(trainer.strategy.root_device))
        loss = loss["loss"] if isinstance(loss, dict) else loss
        (loss / len(batches)).backward()
        total += float(loss.detach())
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if trainer.grad_clip:
        torch.nn.utils.clip_grad_norm_(params, trainer.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total / len(batches)
