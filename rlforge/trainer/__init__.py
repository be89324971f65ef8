"""The trainer: ``RLTrainer`` and the machinery it owns (hook dispatch, progress, checkpoints)."""

from rlforge.trainer.trainer import RLTrainer

__all__ = ["RLTrainer"]
