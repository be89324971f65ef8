"""MonarchStrategy with a LoRA policy: generators get merged weights, the reference is the base in-process."""

from __future__ import annotations

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")
peft = pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from rlforge import GRPOModule, LocalStrategy, RLDataModule, RLTrainer  # noqa: E402
from rlforge.losses import GRPOLoss  # noqa: E402
from rlforge.strategies import MonarchStrategy  # noqa: E402
from tests.strategies.conftest import column, losses  # noqa: E402


def _fit(root, strategy):
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    module = GRPOModule(group_size=4, lr=1e-3, loss=GRPOLoss(beta=0.05), peft=lora)
    trainer = RLTrainer(
        max_steps=3, strategy=strategy, default_root_dir=str(root), enable_progress_bar=False,
        val_check_interval=3, val_at_start=False, seed=1,
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=4, val_size=16))
    return strategy


@pytest.mark.slow
def test_monarch_lora_runs_3_steps_like_local(tmp_path):
    _fit(tmp_path / "local", LocalStrategy(device="cpu"))
    strategy = _fit(tmp_path / "monarch", MonarchStrategy())
    assert strategy._reference_replica is None  # the base model with adapters disabled is the reference
    local, remote = losses(tmp_path / "local"), losses(tmp_path / "monarch")
    assert set(remote) == {1, 2, 3} and any(v != 0 for v in remote.values())
    assert remote == pytest.approx(local, abs=1e-5)
    assert column(tmp_path / "monarch", "train/kl") == pytest.approx(column(tmp_path / "local", "train/kl"), abs=1e-6)
    assert column(tmp_path / "monarch", "rollout/reward_mean") == column(tmp_path / "local", "rollout/reward_mean")
    assert column(tmp_path / "monarch", "val/accuracy") == column(tmp_path / "local", "val/accuracy")
    # The flat buffer holds the merged fp32 weights under HF names (what a plain generator replica loads).
    assert column(tmp_path / "monarch", "perf/sync_bytes") == {s: 856448 * 4 for s in (1, 2, 3)}
