"""The vLLM generator on 2 gloo ranks: every rank's own engine, one run, the update of one process (runs where
vLLM is installed: `bash scripts/test_vllm_cpu.sh`)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: build its env with `bash scripts/make_vllm_cpu_env.sh`, "
    "then run `bash scripts/test_vllm_cpu.sh`",
)

from tests.parallel.dp_helpers import WEIGHT_TOL, fit, max_diff, only_run, step_rows, weights  # noqa: E402
from tests.parallel.test_data_parallel import STEPS, _flags  # noqa: E402

VLLM = ["--trainer.strategy.generator", "vllm", "--trainer.strategy.generator_options",
        "{dtype: float32, max_model_len: 256, enforce_eager: true}"]  # fmt: skip
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_vllm_generators_on_two_ranks_equal_one_process(tiny_policy_dir, tmp_path):
    one = fit([*_flags(tiny_policy_dir, tmp_path / "one"), *VLLM], extra_env=ENV)
    assert one.returncode == 0, one.stderr[-3000:]
    two = fit([*_flags(tiny_policy_dir, tmp_path / "two"), *VLLM], ranks=2, extra_env=ENV)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "Traceback" not in two.stderr  # engines shut down before the process group goes
    ckpt = f"checkpoints/step-{STEPS:06d}"
    w_one, w_two = weights(only_run(tmp_path / "one") / ckpt), weights(only_run(tmp_path / "two") / ckpt)
    assert max_diff(w_one, weights(Path(tiny_policy_dir))) > 1e-3
    assert max_diff(w_one, w_two) < WEIGHT_TOL
    m_one, m_two = step_rows(only_run(tmp_path / "one")), step_rows(only_run(tmp_path / "two"))
    assert [m_two[s]["rollout/reward_mean"] for s in m_two] == [m_one[s]["rollout/reward_mean"] for s in m_one]
