"""The callback connector: default callbacks, their order, and finding the checkpoint callback.

Kept out of the trainer so that the loop never asks what kind of callback it holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlforge.callbacks.callback import Callback
from rlforge.callbacks.checkpoint import ModelCheckpoint
from rlforge.callbacks.progress import ProgressBar


def configure_callbacks(
    callbacks: Sequence[Callback] | None, enable_checkpointing: bool, enable_progress_bar: bool
) -> list[Callback]:
    """The user's callbacks plus a ``ModelCheckpoint`` and a ``ProgressBar`` where none is given (unless disabled)."""
    callbacks = list(callbacks or [])
    if enable_checkpointing and find_checkpoint_callback(callbacks) is None:
        callbacks.append(ModelCheckpoint())
    if enable_progress_bar and not any(isinstance(cb, ProgressBar) for cb in callbacks):
        callbacks.append(ProgressBar())
    return callbacks


def find_checkpoint_callback(callbacks: Sequence[Callback]) -> ModelCheckpoint | None:
    """The first ``ModelCheckpoint`` (the one ``ckpt_path="last"`` and ``run.json`` use), else ``None``."""
    return next((cb for cb in callbacks if isinstance(cb, ModelCheckpoint)), None)
