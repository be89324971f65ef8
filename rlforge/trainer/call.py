"""Hook dispatch: callbacks first, then the module; callbacks with ``runs_last`` (checkpointing) after both."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import rlforge
    from rlforge.callbacks import Callback


def order_callbacks(callbacks: list[Callback]) -> list[Callback]:
    """Moves ``runs_last`` callbacks (checkpointing) to the end so they see every other callback's state."""
    return [cb for cb in callbacks if not cb.runs_last] + [cb for cb in callbacks if cb.runs_last]


def call_hook(trainer: rlforge.RLTrainer, name: str, *args: Any) -> None:
    """Calls ``name`` on every callback (``(trainer, module, *args)``), then on the module (``*args``), then on
    the ``runs_last`` callbacks, so a checkpoint written from a hook holds what the module's hook changed."""
    module = trainer.module
    for callback in trainer.callbacks:
        if not callback.runs_last:
            getattr(callback, name)(trainer, module, *args)
    getattr(module, name)(*args)
    for callback in trainer.callbacks:
        if callback.runs_last:
            getattr(callback, name)(trainer, module, *args)


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
