"""``loss_share``: parts of a batch, each normalised over itself and weighted by its share, sum to the whole's loss.

The reference is ``aggregate`` over the whole batch; the parts are cut by rows and trimmed to their own longest
response (as ranks hold them), and include an empty row.
"""

from __future__ import annotations

import pytest
import torch

from rlforge.losses import AGGREGATION_MODES, aggregate
from rlforge.parallel.loss_scale import Normaliser, loss_share

LENGTHS = (5, 0, 2, 7, 3, 1, 6)


def _trim(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return t[:, : max(int(mask.sum(dim=1).max()), 1)]


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("max_len", [None, 9])
@pytest.mark.parametrize("cut", [[0, 1, 2], [3, 5], [6]])
def test_weighted_parts_sum_to_the_whole_loss(mode, max_len, cut):
    gen = torch.Generator().manual_seed(0)
    mask = (torch.arange(max(LENGTHS)) < torch.tensor(LENGTHS)[:, None]).double()
    loss = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    whole = aggregate(loss, mask, mode, max_len)
    rows = torch.tensor(cut)
    rest = torch.tensor([i for i in range(len(LENGTHS)) if i not in cut])
    total = torch.zeros((), dtype=torch.float64)
    for index in (rows, rest):
        part_mask = _trim(mask[index], mask[index])
        part_loss = loss[index][:, : part_mask.shape[1]]
        share = loss_share(Normaliser.of(part_mask), Normaliser.of(mask), mode, max_len)
        total = total + aggregate(part_loss, part_mask, mode, max_len) * share
    assert torch.allclose(total, whole, rtol=1e-12), (float(total), float(whole))


def test_token_mean_without_tokens_falls_back_to_rows():
    empty = Normaliser(0.0, 2.0, 4.0)
    assert loss_share(empty, Normaliser(0.0, 8.0, 4.0), "token-mean") == 0.25
