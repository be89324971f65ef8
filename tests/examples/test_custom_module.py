"""A user-written RLModule (RLOO) runs in the trainer from the CLI and its advantages are leave-one-out."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.custom_module import RLOOModule
from rlforge.cli import run
from rlforge.types import Completion, Episode
from tests.helpers import metric_rows

REPO = Path(__file__).resolve().parents[2]


def test_leave_one_out_advantages():
    group = [Episode("", "", Completion("", [], [], [1]), reward=r) for r in (1.0, 0.0, 0.0, 1.0)]
    RLOOModule.compute_advantages(None, [group])
    assert [ep.advantage for ep in group] == pytest.approx([1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3])


def test_custom_module_trains_from_cli(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    run(
        [
            "fit",
            "--module",
            "examples.custom_module.RLOOModule",
            "--module.init_args.model",
            tiny_policy_dir,
            "--module.init_args.group_size",
            "3",
            "--data.batch_size",
            "2",
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "2",
            "--data.val_size",
            "4",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    rows = metric_rows(tmp_path)
    assert len(rows) == 2 and "train/seq_logprob" in rows[0]
    assert metric_rows(tmp_path, "val/accuracy")[-1]["step"] == "2"
