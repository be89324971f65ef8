"""Weighing the loss of part of a batch so its gradient equals that part's share of the whole batch's loss.

Each loss is normalised over its own tokens or sequences (``rlforge.losses.aggregation``), so a part's loss
must be rescaled to its share of the whole's normaliser: for ``token-mean`` ``n_part / n`` (response tokens),
for the ``seq-mean-*`` modes ``B_part / B``, for ``seq-mean-token-sum-norm`` without a constant length
``B_part T_part / (B T)`` (the whole pads every row to its longest response). Two users:

- data parallelism (``rank_loss_scale``): FSDP averages gradients over ``W`` ranks, which is right only when every
  rank's loss has the same normaliser; each rank's loss is scaled by ``W`` times its share (1 when they split
  evenly);
- ``GRPOModule(skip_zero_advantage=True)``: the rows left after the zero-advantage rows are dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlforge.parallel.process_group import all_reduce, world_size


class Normaliser(NamedTuple):
    """What the aggregation modes divide by: response ``tokens``, ``rows`` and padded ``width`` of a mask."""

    tokens: float
    rows: float
    width: float

    @classmethod
    def of(cls, mask: torch.Tensor) -> Normaliser:
        """The normaliser of a ``[B, T]`` response mask."""
        return cls(float(mask.sum()), float(mask.shape[0]), float(mask.shape[-1]))


def loss_share(part: Normaliser, whole: Normaliser, aggregation: str, max_len: int | None = None) -> float:
    """The factor that turns a loss normalised over ``part`` into its share of a loss normalised over ``whole``.

    Args:
        part: Normaliser of the part (``width``: its padded width).
        whole: Normaliser of the whole (``width``: the longest padded width of its parts).
        aggregation: The loss's aggregation mode.
        max_len: Constant length of ``seq-mean-token-sum-norm`` (``None``: the padded width).
    """
    if aggregation == "token-mean" and whole.tokens > 0:
        return part.tokens / whole.tokens
    if aggregation == "seq-mean-token-sum-norm" and max_len is None:
        return part.rows * part.width / (whole.rows * whole.width)
    # The seq-mean modes, and token-mean without a token (its loss, and so its gradient, is 0 anyway).
    return part.rows / whole.rows


def rank_loss_scale(mask: torch.Tensor, aggregation: str, max_len: int | None = None) -> float:
    """The factor this rank's loss is multiplied by before ``backward`` (1.0 in a one-process run).

    A collective: every rank calls it once per optimizer step.

    Args:
        mask: ``[B_r, T_r]`` response mask of this rank's part of the minibatch.
        aggregation: The loss's aggregation mode.
        max_len: Constant length of ``seq-mean-token-sum-norm`` (``None``: the padded width).
    """
    ranks = world_size()
    if ranks == 1:
        return 1.0
    part = Normaliser.of(mask)
    totals = all_reduce(torch.tensor([part.tokens, part.rows], dtype=torch.float64, device=mask.device), "sum")
    longest = all_reduce(torch.tensor([part.width], dtype=torch.float64, device=mask.device), "max")
    whole = Normaliser(*totals.tolist(), float(longest.item()))
    return ranks * loss_share(part, whole, aggregation, max_len)
