"""MonarchStrategy with each generator backend: vLLM replicas (vLLM venv), the titan policy (titan venv), and the
one-line missing-extra error where vLLM is absent.

vLLM: `bash scripts/make_vllm_cpu_env.sh`, then `bash scripts/test_vllm_cpu.sh` (runs this file too).
titan: `bash scripts/make_titan_env.sh`, then `bash scripts/test_titan_cpu.sh` (runs this file too).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge import Callback, GRPOModule, RLDataModule, RLTrainer  # noqa: E402
from rlforge.errors import MissingDependencyError  # noqa: E402
from rlforge.strategies import MonarchStrategy, ServiceConfig  # noqa: E402
from tests.helpers import char_reward  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_TITAN = importlib.util.find_spec("torchtitan") is not None
VLLM_OPTIONS = {"dtype": "float32", "max_model_len": 256, "enforce_eager": True}


class _Samplers(Callback):
    def __init__(self) -> None:
        self.samplers: set[str] = set()

    def on_rollout_end(self, trainer, module, groups) -> None:
        self.samplers |= {ep.completion.metadata.get("sampler", "torch") for group in groups for ep in group}


def _rows(trainer: RLTrainer) -> list[dict[str, str]]:
    with open(trainer.log_dir / "metrics.csv") as f:
        return [r for r in csv.DictReader(f) if r.get("train/loss")]


@pytest.mark.skipif(HAS_VLLM, reason="checks the error shown where vLLM is NOT installed")
def test_vllm_backend_without_vllm_is_the_one_line_missing_extra_error(tmp_path):
    with pytest.raises(MissingDependencyError, match="vllm"):
        MonarchStrategy(generator=ServiceConfig(backend="vllm"))
    cli = [sys.executable, "-m", "rlforge.cli", "fit", "--trainer.strategy", "rlforge.strategies.MonarchStrategy"]
    cli += ["--trainer.strategy.generator.backend", "vllm", "--trainer.default_root_dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("rlforge: error")]
    assert "vllm" in line and "trainer.strategy.generator.backend" in line


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed: run it with `bash scripts/test_vllm_cpu.sh`")
def test_vllm_generator_replicas_on_monarch_stay_on_policy(tiny_policy_dir, tmp_path):
    """Rollouts from vLLM replicas, weights pulled through the Generator protocol's update_weights each step."""
    strategy = MonarchStrategy(generator=ServiceConfig(backend="vllm", options=VLLM_OPTIONS))
    module = GRPOModule(model=tiny_policy_dir, group_size=4, reward_fns=[char_reward], lr=1e-2)
    trainer = RLTrainer(
        max_steps=3, strategy=strategy, default_root_dir=str(tmp_path), enable_progress_bar=False,
        val_check_interval=0, seed=0, callbacks=[record := _Samplers()],
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=2))
    assert record.samplers == {"vllm"}
    rows = _rows(trainer)
    assert len(rows) == 3
    # ratio = exp(trainer logprob - vLLM logprob) is 1 at every step: vLLM's logprobs match the trainer's, and
    # each step's weights (lr 1e-2 moves them a lot) reached every replica.
    for row in rows:
        assert abs(float(row["train/ratio_max"]) - 1) < 1e-3 and abs(float(row["train/ratio_min"]) - 1) < 1e-3
        assert float(row["rollout/staleness"]) == 0


@pytest.mark.skipif(not HAS_TITAN, reason="torchtitan is not installed: run it with `bash scripts/test_titan_cpu.sh`")
def test_titan_policy_with_monarch_generators(tiny_policy_dir, tmp_path):
    """The titan policy validates and trains on Monarch: replicas hold its HF twin, weights go under HF names."""
    module = GRPOModule(model=tiny_policy_dir, backend="titan", group_size=4, reward_fns=[char_reward], lr=1e-3)
    trainer = RLTrainer(
        max_steps=2, strategy=MonarchStrategy(), default_root_dir=str(tmp_path), enable_progress_bar=False,
        val_check_interval=2, val_at_start=False, seed=0,
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=2, val_size=8))
    rows = _rows(trainer)
    assert len(rows) == 2
    for row in rows:  # on-policy: the replicas' HF twin and the titan policy agree on every logprob
        assert abs(float(row["train/ratio_max"]) - 1) < 1e-4 and abs(float(row["train/ratio_min"]) - 1) < 1e-4
