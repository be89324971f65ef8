"""The optimizer and LR scheduler of a ``PolicyModule``: AdamW with linear warm-up, or any pair by class_path.

In a config (like LightningCLI's ``OptimizerCallable``)::

    module:
      init_args:
        optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01, momentum: 0.9}}
        lr_scheduler: {class_path: torch.optim.lr_scheduler.StepLR, init_args: {step_size: 50}}

``init_args`` leave out the first argument (``params``, ``optimizer``): the module passes it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch

from rlforge.errors import ConfigError

OptimizerCallable = Callable[[Iterable], torch.optim.Optimizer]
"""An optimizer class by class_path; called with the policy's parameters."""
LRSchedulerCallable = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
"""An LR scheduler class by class_path; called with the optimizer and stepped once per RL step."""


def check_optimizer_args(
    owner: type,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    optimizer: OptimizerCallable | None,
    lr_scheduler: LRSchedulerCallable | None,
) -> None:
    """Raises a ``ConfigError`` naming the ``module.*`` field before anything is loaded or a run folder made.

    ``lr``/``weight_decay`` configure the default AdamW and ``warmup_steps`` the default schedule: a value other
    than ``owner``'s default next to a replacement would be silently ignored, so it is refused.
    """
    for name, value in (("lr", lr), ("weight_decay", weight_decay), ("warmup_steps", warmup_steps)):
        if not value >= 0:  # NaN too; torch would only fail at the first step
            raise ConfigError(f"module.{name} must be >= 0, got {value}")
    for name, value in (("optimizer", optimizer), ("lr_scheduler", lr_scheduler)):
        if value is not None and not callable(value):
            raise ConfigError(f"module.{name} must be a class_path (e.g. torch.optim.SGD), got {value!r}")
    defaults = inspect.signature(owner.__init__).parameters
    for name, value, field, replacement in (
        ("lr", lr, "optimizer", optimizer),
        ("weight_decay", weight_decay, "optimizer", optimizer),
        ("warmup_steps", warmup_steps, "lr_scheduler", lr_scheduler),
    ):
        if replacement is not None and name in defaults and value != defaults[name].default:
            raise ConfigError(f"module.{name} only applies without module.{field}; set it in module.{field}.init_args")


def build_optimizers(
    params: Iterable[torch.nn.Parameter],
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    optimizer: OptimizerCallable | None = None,
    lr_scheduler: LRSchedulerCallable | None = None,
) -> dict[str, Any]:
    """``{"optimizer": ..., "lr_scheduler": ...}``: the given factories, else AdamW and linear warm-up.

    The default AdamW runs torch's fused kernel where every parameter allows it (``fused_adamw_supported``): the same
    update as the per-tensor loop up to float rounding, in one pass over the parameters.
    """
    if optimizer is None:
        params = list(params)
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused_adamw_supported(params) or None)
    else:
        opt = optimizer(params)
    if lr_scheduler is not None:
        return {"optimizer": opt, "lr_scheduler": lr_scheduler(opt)}
    warmup = max(warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / (warmup + 1)))
    return {"optimizer": opt, "lr_scheduler": scheduler}


def fused_adamw_supported(params: list[torch.nn.Parameter]) -> bool:
    """True when torch's fused AdamW kernel takes every parameter: floating point, on CPU or CUDA (sharded DTensor
    parameters too: the kernel has a sharding rule). Elsewhere the default per-tensor loop runs."""
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
