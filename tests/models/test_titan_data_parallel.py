"""The titan backend on 2 gloo ranks through `RLTrainer` (`torchrun -m rlforge fit --module.backend titan`) is ONE
data-parallel run whose update equals a 1-process titan run on the same global batch (runs where torchtitan is
installed).

Build the env with `bash scripts/make_titan_env.sh`, run with `bash scripts/test_titan_cpu.sh`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip(
    "torchtitan",
    reason="torchtitan is not installed here: build its env with `bash scripts/make_titan_env.sh`, "
    "then run `bash scripts/test_titan_cpu.sh`",
)

from tests.helpers import fast_flags  # noqa: E402
from tests.parallel.dp_helpers import OPTIMIZER, WEIGHT_TOL, fit, max_diff, only_run, step_rows, weights  # noqa: E402

STEPS = 3


def _flags(policy: str, root: Path, *extra: str) -> list[str]:
    flags = fast_flags(
        policy, root, trainer__max_steps=STEPS, data__batch_size=4, module__group_size=4,
        trainer__sampling_seeds="group", trainer__seed=5, module__backend="titan", module__optimizer=OPTIMIZER,
    )  # fmt: skip
    # beta > 0: the reference model is a copy of the (sharded) titan policy and its KL enters the loss.
    callbacks = "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}]"
    return [*flags, "--module.loss.beta", "0.04", "--trainer.callbacks", callbacks, *extra]


@pytest.fixture(scope="module")
def one_process(tiny_policy_dir, tmp_path_factory) -> Path:
    """The reference: a 1-process titan run on the same global batch."""
    root = tmp_path_factory.mktemp("one_process")
    one = fit(_flags(tiny_policy_dir, root))
    assert one.returncode == 0, one.stderr[-3000:]
    return only_run(root)


def _check_equals_one_process(run: Path, one: Path, policy_dir: str, what: str) -> None:
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["world_size"] == 2 and manifest["launcher"] == "torchrun" and manifest["status"] == "success"
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert checkpoints == [f"step-{s:06d}" for s in range(1, STEPS + 1)]
    backend = json.loads((run / "checkpoints" / checkpoints[-1] / "policy" / "rlforge_backend.json").read_text())
    assert backend == {"backend": "titan", "flavor": "from-hf-config"}

    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_one, w_two = weights(one / ckpt), weights(run / ckpt)
    assert max_diff(w_one, weights(Path(policy_dir))) > 1e-3  # the weights really moved
    diff = max_diff(w_one, w_two)
    print(f"\ntitan, {what} vs 1 process after {STEPS} steps: max weight diff {diff:.2e}")
    assert diff < WEIGHT_TOL
    m_one, m_two = step_rows(one), step_rows(run)
    assert sorted(m_two) == list(range(1, STEPS + 1))
    assert float(m_one[STEPS]["train/kl"]) > 1e-3  # the reference copy is really used
    for step in m_one:  # same rollouts (per-group seeds), same global loss, gradient norm and KL
        assert m_two[step]["rollout/reward_mean"] == m_one[step]["rollout/reward_mean"]
        for column in ("train/loss", "train/kl"):
            assert float(m_two[step][column]) == pytest.approx(float(m_one[step][column]), abs=1e-6), column
        assert float(m_two[step]["train/grad_norm"]) == pytest.approx(float(m_one[step]["train/grad_norm"]), rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["fsdp2", "tp2"])  # FSDP 2 x DP 2, or TP 2 x DP 1
def test_titan_two_ranks_equal_one_process_and_resume_exactly(tiny_policy_dir, one_process, tmp_path, layout):
    """FSDP over 2 ranks (each trains on half the groups), or tensor parallel 2 (both ranks train on all of them,
    each holding half of every layer); then a resume on 2 ranks from step 2 is bit for bit the straight run."""
    extra = ["--module.backend_options", "{tensor_parallel_degree: 2}"] if layout == "tp2" else []
    two = fit(_flags(tiny_policy_dir, tmp_path / "two", *extra), ranks=2)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("rlforge: success") == 1  # rank 0 alone reports the run
    run = only_run(tmp_path / "two")
    _check_equals_one_process(run, one_process, tiny_policy_dir, layout)

    # Sharded weights and the name-keyed AdamW state scattered back from a checkpoint: step 3 is the same bits.
    step2 = str(run / "checkpoints" / "step-000002")
    resumed = fit(_flags(tiny_policy_dir, tmp_path / "resumed", *extra, "--ckpt_path", step2), ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ckpt = f"checkpoints/step-{STEPS:06d}"
    assert max_diff(weights(run / ckpt), weights(only_run(tmp_path / "resumed") / ckpt)) == 0.0
