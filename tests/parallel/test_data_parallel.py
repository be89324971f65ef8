"""Two gloo ranks are ONE data-parallel run: the update equals one process on the same global batch, one run
folder, one checkpoint per step, and resume after SIGKILL of both ranks is bitwise exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import fast_flags
from tests.parallel.dp_helpers import OPTIMIZER, WEIGHT_TOL, fit, max_diff, only_run, step_rows, weights

STEPS = 3


def _flags(policy: str, root: Path, *extra: str, **overrides) -> list[str]:
    flags = fast_flags(
        policy, root, trainer__max_steps=STEPS, data__batch_size=4, module__group_size=4, module__optimizer=OPTIMIZER,
        trainer__sampling_seeds="group", trainer__seed=5, **overrides,
    )  # fmt: skip
    checkpoints = "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}]"
    return [*flags, "--trainer.callbacks", checkpoints, *extra]


SKIP = ("--module.skip_zero_advantage", "true", "--module.reward_fns", '["tests.helpers.odd_target_reward"]')


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss", "skip"),
    [("rlforge.losses.GRPOLoss", False), ("rlforge.losses.DAPOLoss", False), ("rlforge.losses.DAPOLoss", True)],
)
def test_two_ranks_equal_one_process_on_the_global_batch(tiny_policy_dir, tmp_path, loss, skip):
    """seq-mean (GRPO) and token-mean (DAPO: ranks hold different token counts) aggregation; with ``skip`` the two
    ranks leave their zero-advantage rows out of the update (each its own share) and still equal one process that
    trains every row."""
    one = fit(_flags(tiny_policy_dir, tmp_path / "one", "--module.loss", loss, *SKIP[2:] if skip else ()))
    assert one.returncode == 0, one.stderr[-3000:]
    two = fit(_flags(tiny_policy_dir, tmp_path / "two", "--module.loss", loss, *SKIP if skip else ()), ranks=2)
    assert two.returncode == 0, two.stderr[-3000:]

    run = only_run(tmp_path / "two")
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["world_size"] == 2 and manifest["launcher"] == "torchrun" and manifest["status"] == "success"
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == [f"step-{s:06d}" for s in (1, 2, 3)]
    assert two.stdout.count("rlforge: success") == 1  # rank 0 alone reports the run

    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_one, w_two = weights(only_run(tmp_path / "one") / ckpt), weights(run / ckpt)
    assert max_diff(w_one, weights(Path(tiny_policy_dir))) > 1e-3  # the weights really moved
    assert max_diff(w_one, w_two) < WEIGHT_TOL
    config = json.loads((run / ckpt / "policy" / "config.json").read_text())
    assert not any(a.startswith("FSDP") for a in config["architectures"])  # vLLM and AutoModel read it
    m_one, m_two = step_rows(only_run(tmp_path / "one")), step_rows(run)
    assert sorted(m_two) == [1, 2, 3]
    for step in m_one:  # same rollouts (per-group seeds), same global loss
        assert float(m_two[step]["rollout/reward_mean"]) == pytest.approx(float(m_one[step]["rollout/reward_mean"]))
        assert float(m_two[step]["train/loss"]) == pytest.approx(float(m_one[step]["train/loss"]), abs=1e-6)
    assert manifest["config"]["module"]["init_args"]["loss"]["class_path"] == loss  # the parametrized loss ran
    if skip:
        assert max(float(m_two[step]["train/skipped_rows_frac"]) for step in m_two) > 0


@pytest.mark.slow
def test_sigkill_of_both_ranks_then_resume_is_bitwise_exact_and_resumes_on_one_process(tiny_policy_dir, tmp_path):
    straight = fit(_flags(tiny_policy_dir, tmp_path / "straight"), ranks=2)
    assert straight.returncode == 0, straight.stderr[-3000:]
    killer = "{class_path: tests.trainer.kill_callbacks.KillAfterUpdate, init_args: {step: 3}}"
    callbacks = f"[{{class_path: rlforge.ModelCheckpoint, init_args: {{every_n_steps: 1}}}}, {killer}]"
    killed = fit([*_flags(tiny_policy_dir, tmp_path / "killed"), "--trainer.callbacks", callbacks], ranks=2)
    assert killed.returncode != 0 and "Signal 9 (SIGKILL)" in killed.stderr, killed.stderr[-3000:]
    run = only_run(tmp_path / "killed")
    assert json.loads((run / "checkpoints" / "last.json").read_text())["step"] == 2

    # Same world size: steps 3 of the resumed run are bit for bit those of the uninterrupted run.
    resumed = fit([*_flags(tiny_policy_dir, tmp_path / "killed"), "--ckpt_path", "last"], ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_straight = weights(only_run(tmp_path / "straight") / ckpt)
    w_resumed = weights(sorted((tmp_path / "killed" / "rlforge").glob("version_*"))[-1] / ckpt)
    assert max_diff(w_straight, w_resumed) == 0.0
    m_straight = step_rows(only_run(tmp_path / "straight"))
    m_resumed = step_rows(sorted((tmp_path / "killed" / "rlforge").glob("version_*"))[-1])
    for column in ("train/loss", "rollout/reward_mean", "train/grad_norm"):
        assert m_resumed[3][column] == m_straight[3][column], column

    # Another world size (one process): weights, optimizer state and data position come back, so step 3
    # matches the 2-rank run to float noise.
    other = fit([*_flags(tiny_policy_dir, tmp_path / "one"), "--ckpt_path", str(run / "checkpoints" / "step-000002")])
    assert other.returncode == 0, other.stderr[-3000:]
    assert "resumed on 1" in other.stderr
    assert max_diff(w_straight, weights(only_run(tmp_path / "one") / ckpt)) < 1e-5


@pytest.mark.slow
def test_sft_on_two_ranks_equals_one_process_and_validates_through_the_sharded_policy(tiny_policy_dir, tmp_path):
    """SFT has no generator: validation samples through the FSDP-sharded policy (every rank runs every row)."""

    def flags(root: Path) -> list[str]:
        values = {
            "trainer.max_steps": STEPS, "trainer.default_root_dir": root, "trainer.enable_progress_bar": "false",
            "trainer.val_check_interval": 1, "data.val_size": 6, "data.batch_size": 8, "module.model": tiny_policy_dir,
            "module.lr": 1e-3,
        }  # fmt: skip
        return [item for key, value in values.items() for item in (f"--{key}", str(value))]

    one = fit(flags(tmp_path / "one"), command="sft")
    assert one.returncode == 0, one.stderr[-3000:]
    two = fit(flags(tmp_path / "two"), ranks=2, command="sft")
    assert two.returncode == 0, two.stderr[-3000:]
    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_one, w_two = weights(only_run(tmp_path / "one") / ckpt), weights(only_run(tmp_path / "two") / ckpt)
    assert max_diff(w_one, weights(Path(tiny_policy_dir))) > 2e-4  # moved (the LR warms up over these steps)
    assert max_diff(w_one, w_two) < WEIGHT_TOL
    m_one, m_two = step_rows(only_run(tmp_path / "one")), step_rows(only_run(tmp_path / "two"))
    for step in (1, 2, 3):
        assert float(m_two[step]["val/loss"]) == pytest.approx(float(m_one[step]["val/loss"]), abs=1e-5)
        assert m_two[step]["val/accuracy"] == m_one[step]["val/accuracy"]
