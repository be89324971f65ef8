"""The pieces of a data-parallel step that talk across ranks, on 2 real gloo processes.

- ``rank_loss_scale``: the ranks' scaled losses, averaged as FSDP averages gradients, equal the loss of one
  process on the whole batch for every aggregation mode (reference: ``aggregate`` on the concatenated batch).
- ``StepMetrics.flush``: names logged on one rank only are reduced over both, in the same order everywhere.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlforge.losses.aggregation import AGGREGATION_MODES, aggregate
from rlforge.parallel.loss_scale import rank_loss_scale
from rlforge.trainer.step_metrics import StepMetrics
from tests.helpers import free_port

WORLD = 2


def _shard(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank r's ``[B_r, T_r]`` per-token loss and mask: different widths and token counts per rank."""
    gen = torch.Generator().manual_seed(rank)
    width = 5 if rank == 0 else 9
    loss = torch.randn(3, width, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([[1, 5, 3], [9, 2, 7]][rank])
    mask = (torch.arange(width)[None] < lengths[:, None]).double()
    return loss, mask


def _global() -> tuple[torch.Tensor, torch.Tensor]:
    """One process's batch: both shards, right-padded to the longest response."""
    parts = [_shard(r) for r in range(WORLD)]
    width = max(loss.shape[1] for loss, _ in parts)
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]))  # noqa: E731
    return torch.cat([pad(loss) for loss, _ in parts]), torch.cat([pad(mask) for _, mask in parts])


class _Sink:
    def __init__(self) -> None:
        self.sent: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.sent.append(metrics)


def _worker(rank: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        loss, mask = _shard(rank)
        results = {}
        for mode in AGGREGATION_MODES:
            for max_len in (None, 12):
                scaled = aggregate(loss, mask, mode, max_len) * rank_loss_scale(mask, mode, max_len)
                total = scaled.clone()
                dist.all_reduce(total)
                results[(mode, max_len)] = float(total) / WORLD  # what averaged gradients optimise
        metrics = StepMetrics([], {})
        metrics.record("shared", 1.0 + rank)
        metrics.record(f"only_{rank}", 10.0 * (rank + 1), "sum")
        metrics.record("peak", 3.0 - rank, "max")
        metrics.record("per_token", 2.0 + 2 * rank, weight=1.0 + 2 * rank)  # rank 0: 1 token at 2, rank 1: 3 at 4
        queue.put((rank, results, metrics.flush(1)))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def outcome():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    out = dict((rank, (results, flushed)) for rank, results, flushed in (queue.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("max_len", [None, 12])
def test_ranks_together_optimise_the_one_process_loss(outcome, mode, max_len):
    loss, mask = _global()
    expected = float(aggregate(loss, mask, mode, max_len))
    for rank in range(WORLD):
        assert outcome[rank][0][(mode, max_len)] == pytest.approx(expected, rel=1e-12)


def test_metrics_logged_on_one_rank_are_reduced_over_all(outcome):
    for rank in range(WORLD):
        flushed = outcome[rank][1]
        assert list(flushed) == sorted(flushed)  # same order everywhere: the computes are collectives
        # a weighted mean is over every rank's weights: (1 * 2 + 3 * 4) / 4 tokens, not (2 + 4) / 2 ranks
        assert flushed == {"only_0": 10.0, "only_1": 20.0, "peak": 3.0, "shared": 1.5, "per_token": 3.5}
