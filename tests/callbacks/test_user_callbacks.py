"""User callbacks stacked from YAML: StopOnReward ends the run; WeightSync interval makes staleness real."""

from __future__ import annotations

import csv
from pathlib import Path

from rlforge.cli import run

REPO = Path(__file__).resolve().parents[2]


def always_one(prompt: str, response: str, target: str) -> float:
    return 1.0


def test_stacked_callbacks_from_yaml(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    run(
        [
            "fit",
            "--config",
            "configs/stacked_callbacks.yaml",
            "--module.model",
            tiny_policy_dir,
            "--module.group_size",
            "2",
            "--module.sampling.max_new_tokens",
            "4",
            "--module.reward_fns",
            '["tests.callbacks.test_user_callbacks.always_one"]',
            "--data.batch_size",
            "2",
            "--trainer.val_check_interval",
            "0",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    rows = [row for row in csv.DictReader(open(metrics)) if row.get("train/loss")]
    assert len(rows) == 3  # reward 1.0 from step 1, patience 3: stopped long before max_steps=300
    # sync_interval 2: rollouts of step k use weights of version 2*floor((k-1)/2)
    assert [float(r["rollout/staleness"]) for r in rows] == [0.0, 1.0, 0.0]
    assert (tmp_path / "checkpoints" / "step-000003").is_dir()  # save_last on the early stop
