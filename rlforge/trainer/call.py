"""Hook dispatch: callbacks first, then the module; checkpointing callbacks always last."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import rlforge
    from rlforge.callbacks import Callback


def order_callbacks(callbacks: list[Callback]) -> list[Callback]:
    """Moves checkpointing callbacks to the end so they see every other callback's state."""
    from rlforge.callbacks.checkpoint import ModelCheckpoint

    others = [cb for cb in callbacks if not isinstance(cb, ModelCheckpoint)]
    return others + [cb for cb in callbacks if isinstance(cb, ModelCheckpoint)]


def call_hook(trainer: rlforge.RLTrainer, name: str, *args: Any) -> None:
    """Calls ``name`` on every callback (``(trainer, module, *args)``) and then on the module (``*args``)."""
    module = trainer.module
    for callback in trainer.callbacks:
        getattr(callback, name)(trainer, module, *args)
    getattr(module, name)(*args)


def call_exception_hooks(trainer: rlforge.RLTrainer, exception: BaseException) -> None:
    """Runs ``on_exception`` everywhere; an error inside one of them must not hide the original."""
    for target in [*trainer.callbacks, trainer.module]:
        try:
            if target is trainer.module:
                target.on_exception(exception)
            else:
                target.on_exception(trainer, trainer.module, exception)
        except Exception as nested:  # noqa: BLE001 - reported, original re-raised by the caller
            exception.add_note(f"(while handling it, {type(target).__name__}.on_exception raised {nested!r})")
