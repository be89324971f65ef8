"""``EpochSampler``: a seeded shuffle per epoch whose position is checkpointed, so resume sees the same rows."""

from __future__ import annotations

from typing import Any

import torch


class EpochSampler:
    """Yields batches of row indices, reshuffling (seeded by ``seed`` and the epoch) at each epoch boundary.

    Args:
        num_rows: Rows to draw from.
        batch_size: Indices per batch.
        seed: Shuffle seed.
    """

    def __init__(self, num_rows: int, batch_size: int, seed: int = 0) -> None:
        self.num_rows, self.batch_size, self.seed = num_rows, batch_size, seed
        self.epoch, self.index = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.num_rows, generator=gen).tolist()

    def next_indices(self) -> list[int]:
        out = []
        while len(out) < self.batch_size:
            if self.index >= len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            out.append(self._order[self.index])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._shuffled(self.epoch)
