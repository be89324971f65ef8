"""User callbacks stacked from YAML: StopOnReward ends the run; WeightSync interval makes staleness real."""

from __future__ import annotations

from pathlib import Path

from rlforge.cli import run
from tests.helpers import fast_flags, metric_rows

REPO = Path(__file__).resolve().parents[2]


def always_one(prompt: str, response: str, target: str) -> float:
    return 1.0


def test_stacked_callbacks_from_yaml(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    reward = '["tests.callbacks.test_user_callbacks.always_one"]'
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=300, module__reward_fns=reward)
    run(["fit", "--config", "configs/stacked_callbacks.yaml", *flags])
    rows = metric_rows(tmp_path)
    assert len(rows) == 3  # reward 1.0 from step 1, patience 3: stopped long before max_steps=300
    # sync_interval 2: rollouts of step k use weights of version 2*floor((k-1)/2)
    assert [float(r["rollout/staleness"]) for r in rows] == [0.0, 1.0, 0.0]
    assert (tmp_path / "checkpoints" / "step-000003").is_dir()  # save_last on the early stop
