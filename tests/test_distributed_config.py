"""The shipped multi-GPU config (configs/grpo_llama3_8b_distributed.yaml) parses from the real CLI, without loading
the model, and says what rlforge really runs (it is GPU-only and not run here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "grpo_llama3_8b_distributed.yaml"


def test_llama3_8b_distributed_config_prints_without_loading_the_model(tmp_path):
    # Offline with an empty HF cache: a model or dataset load would fail, so exit 0 proves nothing is loaded.
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
    }  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "rlforge", "fit", "--config", str(CONFIG), "--print_config"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (tmp_path / "hf").exists()  # nothing was fetched or cached
    config = yaml.safe_load(result.stdout)

    module = config["module"]["init_args"]
    assert module["model"] == "meta-llama/Meta-Llama-3-8B-Instruct" and module["dtype"] == "bfloat16"
    # Llama trains with FSDP2 over all ranks on the hf backend: tensor parallelism is titan (Qwen3) only.
    assert module["backend"] == "hf" and not module["backend_options"]
    strategy = config["trainer"]["strategy"]["init_args"]
    assert strategy["device"] == "cuda" and strategy["generator"] == "vllm"
    options = strategy["generator_options"]
    assert options["engine_kwargs"] == {"tensor_parallel_size": 2} and options["dtype"] == "bfloat16"
    assert config["trainer"]["sampling_seeds"] == "group"
    # Groups and minibatches split evenly over the 4 ranks of `torchrun --nproc_per_node 4`.
    assert config["data"]["batch_size"] % 4 == 0 and config["trainer"]["minibatch_size"] % 4 == 0

    header = CONFIG.read_text().split("\ntrainer:")[0]
    assert "srun --ntasks=4 --gpus-per-task=2 rlforge fit --config configs/grpo_llama3_8b_distributed.yaml" in header
    assert "torchrun --nproc_per_node 4 -m rlforge fit --config configs/grpo_llama3_8b_distributed.yaml" in header
    assert "scripts/slurm/grpo.sbatch" in header and "GPU-ONLY" in header
