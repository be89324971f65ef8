"""EarlyStopping, LearningRateMonitor and SampleLogger in real runs; their state survives an exact resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rlforge import (
    EarlyStopping,
    GRPOModule,
    LearningRateMonitor,
    ModelCheckpoint,
    RLDataModule,
    RLTrainer,
    SampleLogger,
)
from rlforge.errors import ConfigError
from tests.helpers import char_reward


def _fit(root: Path, policy: str, max_steps: int, callbacks: list, ckpt_path: str | None = None) -> RLTrainer:
    trainer = RLTrainer(
        max_steps=max_steps,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=None,
        callbacks=[ModelCheckpoint(every_n_steps=2), *callbacks],
        seed=4,
    )
    module = GRPOModule(model=policy, group_size=3, reward_fns=[char_reward], lr=1e-2, warmup_steps=3)
    trainer.fit(module, RLDataModule(batch_size=2), ckpt_path=ckpt_path)
    return trainer


def _rows(trainer: RLTrainer) -> list[dict[str, str]]:
    """Metric rows without the timings (``perf/*`` differ between any two runs)."""
    with open(trainer.log_dir / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(f)]


def test_early_stopping_stops_when_the_metric_stalls(tiny_policy_dir, tmp_path):
    trainer = _fit(tmp_path, tiny_policy_dir, 12, [EarlyStopping(monitor="rollout/reward_mean", patience=2)])
    rewards = [float(r["rollout/reward_mean"]) for r in _rows(trainer)]
    best, wait, expected = -1.0, 0, None  # Lightning's rule: stop after `patience` checks without a new best
    for step, value in enumerate(rewards, 1):
        best, wait = (value, 0) if value > best else (best, wait + 1)
        if wait >= 2:
            expected = step
            break
    assert expected is not None and trainer.global_step == expected < 12
    (stopper,) = [cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping)]
    assert stopper.stopped_step == expected and stopper.best_score == max(rewards)
    assert (
        tmp_path / "rlforge" / "version_0" / "checkpoints" / f"step-{expected:06d}"
    ).is_dir()  # save_last on the early stop


def _callbacks() -> list:
    return [
        EarlyStopping(monitor="train/loss", mode="min", patience=100),
        LearningRateMonitor(log_momentum=True),
        SampleLogger(every_n_steps=2, num_samples=3),
    ]


def test_state_and_metrics_survive_resume(tiny_policy_dir, tmp_path):
    straight = _fit(tmp_path / "a", tiny_policy_dir, 4, _callbacks())
    _fit(tmp_path / "b", tiny_policy_dir, 2, _callbacks())
    resumed = _fit(tmp_path / "b", tiny_policy_dir, 4, _callbacks(), ckpt_path="last")
    assert _rows(resumed) == _rows(straight)  # every column, lr per group and momentum included
    assert resumed.callbacks[1].state_dict() == straight.callbacks[1].state_dict()  # EarlyStopping's best/wait

    rows = _rows(straight)
    assert [float(r["train/lr_pg0"]) for r in rows] == pytest.approx([1e-2 * min(1, s / 4) for s in (1, 2, 3, 4)])
    assert {r["train/momentum_pg0"] for r in rows} == {"0.9"}
    samples = [json.loads(line) for line in (straight.log_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [2, 2, 2, 4, 4, 4]
    assert all(s["reward"] == char_reward(s["prompt"], s["response"], s["target"]) for s in samples)


def test_config_errors():
    with pytest.raises(ConfigError, match="mode must be"):
        EarlyStopping(mode="best")
    with pytest.raises(ConfigError, match="every_n_steps"):
        SampleLogger(every_n_steps=0)
