"""Weighing each rank's loss so a data-parallel update equals one process's update on the whole batch.

FSDP averages gradients over ranks, which is right only when every rank's loss has the same normaliser. Each
rank's loss is normalised over its own tokens or sequences (``rlforge.losses.aggregation``); this factor
rescales it to its share of the global normaliser: for ``token-mean`` ``W n_r / N`` (response tokens), for the
``seq-mean-*`` modes ``W B_r / B`` (1 when the groups split evenly), for ``seq-mean-token-sum-norm`` without a
constant length ``W B_r T_r / (B max_r T_r)`` (one process pads every row to the longest response).
"""

from __future__ import annotations

import torch

from rlforge.parallel.process_group import all_reduce, world_size


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
    tokens, rows, width = float(mask.sum()), float(mask.shape[0]), float(mask.shape[-1])
    totals = all_reduce(torch.tensor([tokens, rows], dtype=torch.float64, device=mask.device), "sum").tolist()
    longest = float(all_reduce(torch.tensor([width], dtype=torch.float64, device=mask.device), "max").item())
    if aggregation == "token-mean":
        share = tokens / totals[0] if totals[0] > 0 else 1.0 / ranks
    elif aggregation == "seq-mean-token-sum-norm" and max_len is None:
        share = rows * width / (totals[1] * longest)
    else:
        share = rows / totals[1]
    return ranks * share
