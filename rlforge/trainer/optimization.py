"""The update half of an RL step: PPO epochs of minibatch optimizer steps, with non-finite steps skipped."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from rlforge.errors import NonFiniteError
from rlforge.metrics import Reduce
from rlforge.parallel import all_reduce
from rlforge.parallel.loss_scale import rank_loss_scale
from rlforge.trainer.call import call_hook

if TYPE_CHECKING:
    import rlforge


def batch_tokens(batch: Any) -> float:
    """Tokens an update learns from: response tokens (RL) or label tokens (SFT)."""
    mask = getattr(batch, "response_mask", None)
    return float(mask.sum()) if mask is not None else float(batch.num_label_tokens)


def configure_optimizers(module: Any) -> tuple[torch.optim.Optimizer, Any]:
    """``(optimizer, lr_scheduler or None)`` from ``module.configure_optimizers()`` (optimizer or Lightning's dict)."""
    out = module.configure_optimizers()
    if isinstance(out, dict):
        return out["optimizer"], out.get("lr_scheduler")
    return out, None


def update(trainer: rlforge.RLTrainer, batch: Any) -> None:
    """``ppo_epochs`` passes of minibatch updates over the batch, then one LR-scheduler step.

    With several ranks ``batch`` is this rank's share and ``trainer.minibatch_size`` counts episodes over all
    ranks: each optimizer step takes ``minibatch_size / data_parallel_size`` episodes from every rank.
    """
    module, size = trainer.module, len(batch)
    per_rank = trainer.minibatch_size // trainer.data_parallel_size if trainer.minibatch_size else None
    mb_size = min(per_rank or size, size)
    module.policy.train()
    batch_idx = 0
    for _ in range(trainer.ppo_epochs):
        shuffle = trainer.ppo_epochs > 1 or mb_size < size
        order = torch.randperm(size) if shuffle else torch.arange(size)
        for begin in range(0, size, mb_size):
            minibatch = batch.select(order[begin : begin + mb_size].to(batch.input_ids.device))
            call_hook(trainer, "on_train_batch_start", minibatch, batch_idx)
            loss = optimizer_step(trainer, minibatch)
            call_hook(trainer, "on_train_batch_end", {"loss": loss}, minibatch, batch_idx)
            batch_idx += 1
    if trainer.lr_scheduler is not None:
        trainer.lr_scheduler.step()
    trainer.progress.samples += size
    trainer.progress.tokens += int(batch_tokens(batch))


def optimizer_step(trainer: rlforge.RLTrainer, minibatch: Any) -> torch.Tensor:
    """loss -> backward (per micro-batch) -> clip -> step (skipped, and counted, when anything is non-finite)."""
    module, optimizer = trainer.module, trainer.optimizer
    # Several ranks: this rank's share of the global loss normaliser (1.0 alone); FSDP averages the gradients.
    scale = rank_loss_scale(*module.loss_normalizer(minibatch)) if trainer.world_size > 1 else 1.0
    loss = torch.zeros(())
    for part, weight in module.split_for_accumulation(minibatch):
        out = module.training_step(part)
        part_loss = (out["loss"] if isinstance(out, dict) else out) * (weight * scale)
        call_hook(trainer, "on_before_backward", part_loss)
        part_loss.backward()
        call_hook(trainer, "on_after_backward")
        loss = loss + part_loss.detach().cpu()
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    max_norm = trainer.grad_clip if trainer.grad_clip else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)
    if hasattr(grad_norm, "full_tensor"):  # sharded parameters: the norm is a replicated DTensor, global already
        grad_norm = grad_norm.full_tensor()
    if trainer.world_size > 1:  # the global loss, so every rank takes the same skip decision
        loss = all_reduce(loss.double(), "sum") / trainer.world_size
    call_hook(trainer, "on_before_optimizer_step", optimizer)
    loss_value, norm_value = float(loss), float(grad_norm)
    if math.isfinite(loss_value) and math.isfinite(norm_value):
        optimizer.step()
        trainer.progress.optimizer_steps += 1
        trainer.consecutive_skips = 0
    else:
        _skip_step(trainer, loss_value, norm_value)
    optimizer.zero_grad(set_to_none=True)
    trainer.log("train/loss", loss_value)
    trainer.log("train/grad_norm", norm_value)
    trainer.log("train/lr", optimizer.param_groups[0]["lr"])
    return loss


def _skip_step(trainer: rlforge.RLTrainer, loss_value: float, norm_value: float) -> None:
    trainer.progress.skipped_steps += 1
    trainer.consecutive_skips += 1
    if trainer.is_global_zero:  # every rank skips the same step: count it once, not once per rank
        trainer.log("train/skipped_steps", 1.0, Reduce.SUM)
    if trainer.consecutive_skips >= trainer.max_consecutive_skips:
        culprit = "loss" if not math.isfinite(loss_value) else _nonfinite_grad_name(trainer.module.policy)
        raise NonFiniteError(
            f"step {trainer.global_step + 1}: non-finite {culprit} (loss={loss_value}, grad_norm={norm_value}) "
            f"in {trainer.consecutive_skips} consecutive updates; lower the lr or check the loss"
        )


def _nonfinite_grad_name(model: torch.nn.Module) -> str:
    """``gradient of <first parameter whose gradient has NaN/inf>`` (the gradient norm was not finite)."""
    for name, param in model.named_parameters():
        if param.grad is not None and not torch.isfinite(param.grad).all():
            return f"gradient of {name}"
    return "gradient norm"
