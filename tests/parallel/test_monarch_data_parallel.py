"""MonarchStrategy on 2 ranks: ONE set of actors for the run. Rank 0 samples, scores and references the whole step
on them and scatters whole groups; the update equals a one-process LocalStrategy run on the same global batch, and
a resume from a 2-rank checkpoint is bitwise exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy needs torchmonarch (the `monarch` extra, in `dev`)")

from tests.parallel.dp_helpers import WEIGHT_TOL, fit, max_diff, only_run, step_rows, weights  # noqa: E402
from tests.parallel.test_data_parallel import STEPS, _flags  # noqa: E402

MONARCH = ["--trainer.strategy", "rlforge.strategies.MonarchStrategy"]
KL = ["--module.loss.beta", "0.04"]  # the reference actor runs on rank 0 and its logprobs travel with the groups


@pytest.mark.slow
def test_two_ranks_share_one_set_of_actors_and_equal_one_local_process(tiny_policy_dir, tmp_path):
    local = fit([*_flags(tiny_policy_dir, tmp_path / "local"), *KL])
    assert local.returncode == 0, local.stderr[-3000:]
    two = fit([*_flags(tiny_policy_dir, tmp_path / "two"), *KL, *MONARCH], ranks=2)
    assert two.returncode == 0, two.stderr[-3000:]
    run = only_run(tmp_path / "two")
    assert json.loads((run / "run.json").read_text())["world_size"] == 2
    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_local, w_two = weights(only_run(tmp_path / "local") / ckpt), weights(run / ckpt)
    assert max_diff(w_local, weights(Path(tiny_policy_dir))) > 1e-3
    assert max_diff(w_local, w_two) < WEIGHT_TOL
    m_local, m_two = step_rows(only_run(tmp_path / "local")), step_rows(run)
    for step in (1, 2, 3):
        assert m_two[step]["rollout/reward_mean"] == m_local[step]["rollout/reward_mean"]
        assert float(m_two[step]["train/kl"]) == pytest.approx(float(m_local[step]["train/kl"]), abs=1e-6)

    step2 = ["--ckpt_path", str(run / "checkpoints" / "step-000002")]
    resumed = fit([*_flags(tiny_policy_dir, tmp_path / "resumed"), *KL, *MONARCH, *step2], ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert max_diff(w_two, weights(only_run(tmp_path / "resumed") / ckpt)) == 0.0
