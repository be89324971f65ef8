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
    assert (tmp_path / "rlforge" / "version_0" / "checkpoints" / "step-000003").is_dir()  # save_last on the early stop
    # The stacked built-ins ran too: KL measured against a reference at beta 0, per-group lr, samples file.
    assert all(float(r["train/kl"]) >= 0.0 for r in rows) and rows[-1]["train/lr_pg0"] == rows[-1]["train/lr"]
    assert not list(tmp_path.glob("rlforge/version_*/samples.jsonl"))  # every 25 steps: none in 3 steps


def test_truncation_alarm_stops(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    callbacks = "[{class_path: callbacks.truncation_alarm.TruncationAlarm, init_args: {patience: 2, stop: true}}]"
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=20, module__sampling__max_new_tokens=2)
    run(["fit", *flags, "--trainer.callbacks", callbacks])
    rows = metric_rows(tmp_path)
    streak, expected = 0, None
    for step, row in enumerate(rows, 1):
        streak = streak + 1 if float(row["rollout/truncated_frac"]) > 0.5 else 0
        if streak == 2:
            expected = step
            break
    assert expected is not None and len(rows) == expected < 20
