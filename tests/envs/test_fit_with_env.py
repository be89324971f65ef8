"""Training with an environment: the YAML path, turn metrics in metrics.csv, async staleness and exact resume."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from rlforge import GRPOModule, LocalStrategy, ModelCheckpoint, RLDataModule, RLTrainer, SamplingParams
from rlforge.errors import ConfigError
from tests.envs.scripted_envs import CountdownEnv

REPO = Path(__file__).resolve().parents[2]


def _rows(metrics_csv: Path, column: str) -> dict[int, str]:
    with open(metrics_csv) as f:
        return {int(r["step"]): r[column] for r in csv.DictReader(f) if r.get(column)}


def test_environment_from_yaml_trains_and_logs_turn_metrics(tmp_path):
    config = tmp_path / "env.yaml"
    config.write_text(
        "module:\n"
        "  class_path: rlforge.GRPOModule\n"
        "  init_args:\n"
        "    group_size: 3\n"
        "    sampling: {max_new_tokens: 5}\n"
        "    environment:\n"
        "      class_path: tests.envs.scripted_envs.CountdownEnv\n"
        "      init_args: {turns: 2, max_turns: 3}\n"
    )
    cmd = [sys.executable, "-m", "rlforge.cli", "fit", "--config", str(config), "--trainer.max_steps", "2",
           "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
           "--trainer.val_check_interval", "2", "--data.batch_size", "2", "--data.val_size", "4"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    turns, calls = _rows(metrics, "rollout/turns_mean"), _rows(metrics, "rollout/tool_calls_mean")
    assert [float(turns[s]) for s in (1, 2)] == [2.0, 2.0] and float(calls[2]) == 2.0
    assert float(_rows(metrics, "env/errors")[2]) == 0.0
    assert 0.0 < float(_rows(metrics, "env/step_s")[2]) < 5.0
    assert set(_rows(metrics, "val/accuracy")) == {0, 2}


def test_reward_fns_with_an_environment_is_a_config_error():
    with pytest.raises(ConfigError, match="module.reward_fns is set but module.environment gives the reward"):
        GRPOModule(environment=CountdownEnv(), reward_fns=["tests.helpers.char_reward"])


def test_a_non_environment_is_a_config_error():
    with pytest.raises(ConfigError, match="module.environment must be an rlforge.envs.Environment"):
        GRPOModule(environment=object())


def _fit(root: Path, max_steps: int, ckpt_path: str | None = None, max_staleness: int = 0) -> Path:
    """A 3-turn-budget CountdownEnv run (seeded hints), checkpoint every 2 steps."""
    module = GRPOModule(group_size=3, lr=1e-3, sampling=SamplingParams(max_new_tokens=5),
                        environment=CountdownEnv(turns=2))  # fmt: skip
    trainer = RLTrainer(
        max_steps=max_steps, default_root_dir=str(root), enable_progress_bar=False, val_check_interval=None,
        callbacks=[ModelCheckpoint(every_n_steps=2)], seed=3, strategy=LocalStrategy(max_staleness=max_staleness),
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=2), ckpt_path=ckpt_path)
    return trainer.log_dir / "metrics.csv"


def test_resume_with_an_environment_matches_an_uninterrupted_run(tmp_path):
    straight = _fit(tmp_path / "a", 4)
    _fit(tmp_path / "b", 2)
    resumed = _fit(tmp_path / "b", 4, ckpt_path="last")
    for column in ("train/loss", "rollout/reward_mean", "rollout/episode_len", "train/grad_norm"):
        assert _rows(resumed, column) == _rows(straight, column), column
    assert any(float(v) != 0.0 for v in _rows(straight, "train/loss").values())


def test_asynchronous_rollouts_with_an_environment_train_with_staleness(tmp_path):
    metrics = _fit(tmp_path, 3, max_staleness=1)
    assert [float(v) for v in _rows(metrics, "rollout/staleness").values()] == [0.0, 1.0, 1.0]
    assert float(_rows(metrics, "rollout/turns_mean")[3]) == 2.0
