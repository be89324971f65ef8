"""The custom-environment example: its retry contract, and training from configs/custom_env.yaml."""

from __future__ import annotations

from pathlib import Path

from examples.custom_env import RetryArithmetic
from rlforge.cli import run
from tests.helpers import metric_rows

REPO = Path(__file__).resolve().parents[2]


def test_retry_rewards_fall_with_each_attempt():
    env = RetryArithmetic(discount=0.5).spawn()
    assert env.reset({"prompt": "Q: What is 2 + 3?\nA:", "target": "5"}, seed=0).text.endswith("A:")
    wrong = env.step(" #### 6")
    assert not wrong.done and wrong.reward == 0.0 and "try again" in wrong.observation.text
    right = env.step(" #### 5")
    assert right.done and right.reward == 0.5 and right.info["success"]


def test_custom_env_trains_from_yaml(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    flags = {
        "trainer.max_steps": 3, "trainer.default_root_dir": str(tmp_path), "trainer.enable_progress_bar": "false",
        "trainer.val_check_interval": 3, "data.batch_size": 4, "data.val_size": 8, "module.group_size": 4,
    }  # fmt: skip
    run(
        ["fit", "--config", "configs/custom_env.yaml", *[x for kv in flags.items() for x in (f"--{kv[0]}", str(kv[1]))]]
    )
    rows = metric_rows(tmp_path, "rollout/turns_mean")
    assert len(rows) == 3
    assert max(float(r["rollout/turns_mean"]) for r in rows) > 1.0  # wrong answers were retried
    assert all(float(r["env/errors"]) == 0.0 for r in rows)
    assert metric_rows(tmp_path, "val/accuracy")
