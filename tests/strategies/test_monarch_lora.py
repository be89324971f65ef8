"""MonarchStrategy with a LoRA policy: generators get merged weights, the reference is the base in-process."""

from __future__ import annotations

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")
peft = pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from rlforge import Callback, GRPOModule, LocalStrategy, RLDataModule, RLTrainer  # noqa: E402
from rlforge.losses import GRPOLoss  # noqa: E402
from rlforge.strategies import MonarchStrategy  # noqa: E402
from tests.strategies.conftest import column, losses  # noqa: E402


class _Reference(Callback):
    def on_train_start(self, trainer, module):
        self.kind = type(trainer.services.reference).__name__


def _fit(root, strategy, callbacks=()):
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    module = GRPOModule(group_size=4, lr=1e-3, loss=GRPOLoss(beta=0.05), peft=lora)
    trainer = RLTrainer(
        max_steps=3, strategy=strategy, default_root_dir=str(root), enable_progress_bar=False,
        val_check_interval=3, val_at_start=False, seed=1, callbacks=list(callbacks),
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=4, val_size=16))
    return strategy


@pytest.mark.slow
def test_monarch_lora_runs_3_steps_like_local(tmp_path):
    _fit(tmp_path / "local", LocalStrategy(device="cpu"))
    _fit(tmp_path / "monarch", MonarchStrategy(), callbacks=[reference := _Reference()])
    assert reference.kind == "LocalReference"  # the base model with adapters disabled, in process: no actor
    local, remote = losses(tmp_path / "local"), losses(tmp_path / "monarch")
    assert set(remote) == {1, 2, 3} and any(v != 0 for v in remote.values())
    assert remote == pytest.approx(local, abs=1e-5)
    assert column(tmp_path / "monarch", "train/kl") == pytest.approx(column(tmp_path / "local", "train/kl"), abs=1e-6)
    assert column(tmp_path / "monarch", "rollout/reward_mean") == column(tmp_path / "local", "rollout/reward_mean")
    assert column(tmp_path / "monarch", "val/accuracy") == column(tmp_path / "local", "val/accuracy")
    # The flat buffer holds the merged fp32 weights under HF names (what a plain generator replica loads).
    assert column(tmp_path / "monarch", "perf/sync_bytes") == {s: 856448 * 4 for s in (1, 2, 3)}
