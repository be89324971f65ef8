"""The extension contract: every hook the trainer calls, as a documented no-op.

Hooks run in this order (callbacks first, then the module, then ``runs_last`` callbacks: checkpointing)::

    setup -> on_fit_start -> on_train_start -> [initial validation]
    per step:
        on_rollout_start -> on_rollout_end
        per minibatch: on_train_batch_start -> on_before_backward -> on_after_backward
                       -> on_before_optimizer_step -> on_train_batch_end
        on_weight_sync_start -> on_weight_sync_end        (steps where weights are synced)
        on_validation_start -> on_validation_end          (steps where validation runs)
        on_train_step_end [ModelCheckpoint saves: on_save_checkpoint]
    on_train_end -> on_fit_end -> teardown
    on_exception on any error (then the error is re-raised)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    import rlforge
    from rlforge.types import Group, TrainBatch


class Callback:
    """Base class of trainer callbacks. Override only the hooks you need."""

    runs_last: bool = False
    """Run this callback's hooks after every other callback's and the module's (``ModelCheckpoint``)."""

    @property
    def state_key(self) -> str:
        """Key of this callback's state in checkpoints; override if several instances hold state."""
        return type(self).__qualname__

    def state_dict(self) -> dict[str, Any]:
        """State saved in checkpoints (restored with ``load_state_dict`` on resume)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        """Called when fit or validate begins, before models are placed (``stage`` is ``fit``/``validate``)."""

    def teardown(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        """Called when fit or validate ends, also after an error."""

    def on_fit_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called when fit begins, after setup and checkpoint restore."""

    def on_fit_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called when fit ends."""

    def on_train_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called before the first training step."""

    def on_train_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called after the last training step."""

    def on_rollout_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called before prompts are sampled for a step."""

    def on_rollout_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, groups: list[Group]) -> None:
        """Called with the scored groups (rewards, advantages, reference logprobs filled)."""

    def on_train_batch_start(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, batch: TrainBatch, batch_idx: int
    ) -> None:
        """Called before each minibatch update."""

    def on_before_backward(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, loss: torch.Tensor) -> None:
        """Called before ``loss.backward()``."""

    def on_after_backward(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called after ``loss.backward()``, before gradient clipping."""

    def on_before_optimizer_step(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """Called after clipping, before ``optimizer.step()``."""

    def on_train_batch_end(
        self,
        trainer: rlforge.RLTrainer,
        module: rlforge.RLModule,
        outputs: dict[str, Any],
        batch: TrainBatch,
        batch_idx: int,
    ) -> None:
        """Called after each minibatch update; ``outputs["loss"]`` is the detached loss."""

    def on_weight_sync_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called before policy weights are pushed to the generator."""

    def on_weight_sync_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called after the generator holds the new weights."""

    def on_validation_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called before validation."""

    def on_validation_end(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        """Called after validation; its metrics are in ``trainer.callback_metrics``."""

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        """Called at the end of each RL step with the step's logged metrics."""

    def on_save_checkpoint(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, checkpoint: dict[str, Any]
    ) -> None:
        """Called while a checkpoint is built; may add entries to ``checkpoint``."""

    def on_load_checkpoint(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, checkpoint: dict[str, Any]
    ) -> None:
        """Called when resuming, with the loaded checkpoint."""

    def on_exception(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, exception: BaseException) -> None:
        """Called when fit or validate raises."""
