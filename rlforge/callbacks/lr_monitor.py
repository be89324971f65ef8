"""``LearningRateMonitor``: logs the learning rate (and momentum) of every optimizer parameter group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlforge.callbacks.callback import Callback

if TYPE_CHECKING:
    import torch

    import rlforge


class LearningRateMonitor(Callback):
    """Logs ``train/lr_pg<i>`` (and ``train/momentum_pg<i>``) for each parameter group at every update.

    ``train/lr`` (group 0) is always logged by the trainer; use this callback for several groups,
    momentum, or schedulers you want to see per group.

    Args:
        log_momentum: Also log ``momentum`` (SGD) or ``betas[0]`` (Adam-style optimizers).
    """

    def __init__(self, log_momentum: bool = False) -> None:
        self.log_momentum = log_momentum

    def on_before_optimizer_step(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, optimizer: torch.optim.Optimizer
    ) -> None:
        for i, group in enumerate(optimizer.param_groups):
            module.log(f"train/lr_pg{i}", group["lr"])
            if self.log_momentum:
                momentum = group.get("momentum", group.get("betas", (None,))[0])
                if momentum is not None:
                    module.log(f"train/momentum_pg{i}", momentum)
