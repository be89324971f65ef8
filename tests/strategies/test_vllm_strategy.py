"""``LocalStrategy(generator="vllm")`` end to end: GRPO steps whose rollouts come from a vLLM engine.

Runs where vLLM is installed: `bash scripts/make_vllm_cpu_env.sh`, then `bash scripts/test_vllm_cpu.sh`.
"""

from __future__ import annotations

import csv
import os

import pytest

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: build its env with `bash scripts/make_vllm_cpu_env.sh`, "
    "then run `bash scripts/test_vllm_cpu.sh`",
)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from rlforge import Callback, GRPOModule, LocalStrategy, RLDataModule, RLTrainer  # noqa: E402

VLLM_OPTIONS = {"dtype": "float32", "max_model_len": 256, "enforce_eager": True}


def varied_reward(prompt: str, response: str, target: str) -> float:
    return float(len(response) % 2)


class RecordSamplers(Callback):
    def __init__(self) -> None:
        self.samplers: set[str] = set()

    def on_rollout_end(self, trainer, module, groups) -> None:
        self.samplers |= {ep.completion.metadata.get("sampler", "torch") for group in groups for ep in group}


def test_fit_with_vllm_rollouts_stays_on_policy(tiny_policy_dir, tmp_path):
    strategy = LocalStrategy(device="cpu", generator="vllm", generator_options=VLLM_OPTIONS)
    module = GRPOModule(model=tiny_policy_dir, group_size=4, reward_fns=[varied_reward], lr=1e-2)
    trainer = RLTrainer(
        max_steps=3,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        val_check_interval=3,
        seed=0,
        strategy=strategy,
        callbacks=[record := RecordSamplers()],
    )
    trainer.fit(module, RLDataModule(batch_size=2))
    assert record.samplers == {"vllm"}
    assert trainer.policy_version == 3
    with open(trainer.log_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(rows) == 3
    # One update per step on fresh rollouts: ratio = exp(trainer logprob - vLLM logprob) must be 1 at every
    # step, which also proves each step's weight sync reached the engine (lr 1e-2 moves the weights a lot).
    for row in rows:
        assert abs(float(row["train/ratio_max"]) - 1) < 1e-3 and abs(float(row["train/ratio_min"]) - 1) < 1e-3
        assert float(row["rollout/staleness"]) == 0
