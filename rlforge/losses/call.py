"""How ``GRPOModule`` calls a loss: any ``nn.Module`` whose ``forward`` takes the four RL tensors by name.

The contract for a loss that is not a ``PolicyLoss``::

    forward(logprobs, ref_logprobs, advantages, padding_mask[, old_logprobs]) -> scalar

* ``logprobs``, ``ref_logprobs``, ``padding_mask``: ``[B, T]`` over the response tokens. ``ref_logprobs`` are
  the reference model's real logprobs (the reference runs for such a loss), never ``None``.
* ``advantages``: ``[B, 1]``, so ``ratio * advantages`` broadcasts over the tokens (a ``PolicyLoss`` gets ``[B]``).
* ``old_logprobs`` (the sampler's logprobs, ``None`` on-policy) only when ``forward`` names it or takes ``**kwargs``.
* ``last_metrics`` (a dict logged as ``train/<name>``) is optional.
"""

from __future__ import annotations

import inspect
from typing import Protocol

from torch import Tensor, nn

from rlforge.errors import ConfigError
from rlforge.losses.base import PolicyLoss

LOSS_ARGS = ("logprobs", "ref_logprobs", "advantages", "padding_mask")


class LossModule(Protocol):
    """A loss outside ``PolicyLoss`` (a config may name any class whose ``forward`` takes these, by name)."""

    def forward(self, logprobs, ref_logprobs, advantages, padding_mask):  # noqa: ANN001, ANN201 - any types
        """Returns the scalar loss; see the module docstring for the shapes."""


def _parameters(loss: nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(loss.forward).parameters)


def takes_old_logprobs(loss: nn.Module) -> bool:
    """Whether ``loss.forward`` accepts ``old_logprobs`` (by name or through ``**kwargs``)."""
    params = _parameters(loss)
    return "old_logprobs" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_loss(loss: object, field: str = "module.loss") -> None:
    """Raises a ``ConfigError`` naming ``field`` unless ``loss`` is an ``nn.Module`` callable with the contract."""
    if not isinstance(loss, nn.Module):
        raise ConfigError(f"{field}: a loss must be a torch.nn.Module, got {type(loss).__name__}")
    try:
        inspect.signature(loss.forward).bind(**dict.fromkeys(LOSS_ARGS))
    except TypeError as err:
        raise ConfigError(
            f"{field}: {type(loss).__name__}.forward must take ({', '.join(LOSS_ARGS)}) by name ({err})"
        ) from None


def call_loss(
    loss: nn.Module,
    logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: Tensor,
    padding_mask: Tensor,
    old_logprobs: Tensor | None,
) -> Tensor:
    """Calls ``loss`` with what it takes (see the module docstring)."""
    if not isinstance(loss, PolicyLoss) and advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    kwargs = {"old_logprobs": old_logprobs} if takes_old_logprobs(loss) else {}
    return loss(
        logprobs=logprobs, ref_logprobs=ref_logprobs, advantages=advantages, padding_mask=padding_mask, **kwargs
    )
