"""The titan backend on 2 gloo ranks through `RLTrainer` (`torchrun -m rlforge fit --module.backend titan`) is ONE
data-parallel run whose update equals a 1-process titan run on the same global batch (runs where torchtitan is
installed).

Build the env with `bash scripts/make_titan_env.sh`, run with `bash scripts/test_titan_cpu.sh`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip(
    "torchtitan",
    reason="torchtitan is not installed here: build its env with `bash scripts/make_titan_env.sh`, "
    "then run `bash scripts/test_titan_cpu.sh`",
)

from tests.helpers import fast_flags  # noqa: E402
from tests.parallel.dp_helpers import fit, max_diff, weights  # noqa: E402

STEPS = 3
# AdamW's first update of an element is lr * g / (|g| + eps): where |g| is below eps = 1e-8 the float noise of
# summing the gradient in another order (two half-batch backwards + a reduce-scatter) moves it by up to ~1% of
# lr = 1e-3. Measured: one element of layers.3.o_proj, gradient -2.6e-10 alone vs -1.5e-10 on 2 ranks, gives
# 1.07e-5 after step 1, unchanged by steps 2-3. A wrong gradient division or a lost optimizer state moves
# weights by ~1e-3 (and the grad norms below by a factor).
WEIGHT_TOL = 3e-5


def _flags(policy: str, root: Path, *extra: str) -> list[str]:
    flags = fast_flags(
        policy, root, trainer__max_steps=STEPS, data__batch_size=4, module__group_size=4, module__lr=1e-3,
        trainer__sampling_seeds="group", trainer__seed=5, module__backend="titan",
    )  # fmt: skip
    # beta > 0: the reference model is a copy of the (sharded) titan policy and its KL enters the loss.
    callbacks = "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}]"
    return [*flags, "--module.loss.beta", "0.04", "--trainer.callbacks", callbacks, *extra]


def _run_dir(root: Path) -> Path:
    runs = sorted((root / "rlforge").glob("version_*"))
    assert [r.name for r in runs] == ["version_0"], runs  # one run, not one per rank
    return runs[0]


def _metrics(run: Path) -> dict[int, dict[str, str]]:
    with open(run / "metrics.csv") as f:
        return {int(r["step"]): r for r in csv.DictReader(f) if r.get("train/loss")}


@pytest.mark.slow
def test_titan_two_ranks_equal_one_process_and_resume_exactly(tiny_policy_dir, tmp_path):
    one = fit(_flags(tiny_policy_dir, tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    two = fit(_flags(tiny_policy_dir, tmp_path / "two"), ranks=2)
    assert two.returncode == 0, two.stderr[-3000:]

    run = _run_dir(tmp_path / "two")
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["world_size"] == 2 and manifest["launcher"] == "torchrun" and manifest["status"] == "success"
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert checkpoints == [f"step-{s:06d}" for s in range(1, STEPS + 1)]
    assert json.loads((run / "checkpoints" / checkpoints[-1] / "policy" / "rlforge_backend.json").read_text()) == {
        "backend": "titan",
        "flavor": "from-hf-config",
    }
    assert two.stdout.count("rlforge: success") == 1  # rank 0 alone reports the run

    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_one, w_two = weights(_run_dir(tmp_path / "one") / ckpt), weights(run / ckpt)
    assert max_diff(w_one, weights(Path(tiny_policy_dir))) > 1e-3  # the weights really moved
    diff = max_diff(w_one, w_two)
    print(f"\ntitan, 2 ranks vs 1 process after {STEPS} steps: max weight diff {diff:.2e}")
    assert diff < WEIGHT_TOL
    m_one, m_two = _metrics(_run_dir(tmp_path / "one")), _metrics(run)
    assert sorted(m_two) == list(range(1, STEPS + 1))
    assert float(m_one[STEPS]["train/kl"]) > 1e-3  # the reference copy is really used
    for step in m_one:  # same rollouts (per-group seeds), same global loss, gradient norm and KL
        assert m_two[step]["rollout/reward_mean"] == m_one[step]["rollout/reward_mean"]
        for column in ("train/loss", "train/kl"):
            assert float(m_two[step][column]) == pytest.approx(float(m_one[step][column]), abs=1e-6), column
        assert float(m_two[step]["train/grad_norm"]) == pytest.approx(float(m_one[step]["train/grad_norm"]), rel=1e-5)

    # Resume on 2 ranks from step 2 (sharded weights and the name-keyed AdamW state scattered back): step 3 is
    # bit for bit the uninterrupted run's.
    step2 = str(run / "checkpoints" / "step-000002")
    resumed = fit(_flags(tiny_policy_dir, tmp_path / "resumed", "--ckpt_path", step2), ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert max_diff(w_two, weights(_run_dir(tmp_path / "resumed") / ckpt)) == 0.0
