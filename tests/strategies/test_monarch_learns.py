"""Acceptance (shortened for CI): async rollouts (max_staleness=1) learn the default task like LocalStrategy.

The synchronous MonarchStrategy curve equals LocalStrategy's exactly (test_monarch_fit.py); this checks
the asynchronous one on the default config, 100 of its 300 steps, against an independent local run.
"""

from __future__ import annotations

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge import GRPOModule, LocalStrategy, RLDataModule, RLTrainer
from rlforge.strategies import MonarchStrategy
from tests.strategies.conftest import column


def _accuracy(root, strategy) -> dict[int, float]:
    trainer = RLTrainer(
        max_steps=100,
        strategy=strategy,
        default_root_dir=str(root),
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(GRPOModule(), RLDataModule())
    return column(root, "val/accuracy")


@pytest.mark.slow
def test_async_rollouts_learn_the_default_task_like_local(tmp_path):
    local = _accuracy(tmp_path / "local", LocalStrategy())
    async_ = _accuracy(tmp_path / "async", MonarchStrategy(max_staleness=1))
    assert local[0] == async_[0]  # same start: validation runs in the trainer with the same weights
    assert local[100] - local[0] >= 0.15, local
    assert async_[100] - async_[0] >= 0.15, async_
    assert async_[100] >= local[100] - 0.08, (local, async_)
