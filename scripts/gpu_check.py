"""A short GRPO run on one GPU with the vLLM generator and the torchtitan backend; prints tokens/s and times.

Uses configs/grpo_gsm8k_qwen3_1_7b.yaml with a small batch and the built-in ``addition`` task (no dataset
download). ``--model`` defaults to a random-init Qwen3-1.7B-shaped checkpoint written locally (no hub access
needed: speed does not depend on the weights); pass ``--model Qwen/Qwen3-1.7B`` for the real one.

    bash scripts/gpu_check.sh [--steps 6] [--model PATH_OR_HUB_ID] [--out runs/gpu_check]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fail(message: str) -> None:
    print(f"gpu_check: error: {message}", file=sys.stderr)
    sys.exit(1)


def check_environment() -> None:
    import torch

    if not torch.cuda.is_available():
        fail(f"no CUDA GPU visible (torch {torch.__version__}); this check needs one GPU, vLLM and torchtitan")
    from rlforge.imports import _TITAN_AVAILABLE, _VLLM_AVAILABLE

    for name, available in (("vllm", _VLLM_AVAILABLE), ("titan", _TITAN_AVAILABLE)):
        if not available:
            fail(f"the `{name}` extra is missing: pip install 'rlforge[{name}]' ({available})")


def random_qwen3_1_7b(folder: Path) -> str:
    """Writes a random-init checkpoint with Qwen3-1.7B's shapes (bf16) and a small local tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlforge.models.tiny import train_tokenizer

    if (folder / "config.json").exists():
        return str(folder)
    config = AutoConfig.for_model(
        "qwen3",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=1,
        pad_token_id=0,
    )
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    corpus = [f"Q: What is {a} + {b}?\nA: #### {a + b}" for a in range(100) for b in range(0, 100, 7)]
    train_tokenizer(corpus, vocab_size=512).save_pretrained(folder)
    return str(folder)


def fit_args(model: str, out: Path, steps: int, real_model: bool) -> list[str]:
    """``rlforge fit`` arguments: the GPU config, shortened, on the built-in ``addition`` task."""
    flags = {
        "--trainer.max_steps": steps,
        "--trainer.val_check_interval": 0,
        "--trainer.val_at_start": "false",
        "--trainer.enable_progress_bar": "false",
        "--trainer.default_root_dir": str(out),
        "--trainer.callbacks": "[]",
        "--module.model": model,
        "--module.sampling.max_new_tokens": 256,
        "--data.dataset": "null",
        "--data.dataset_config": "null",
        "--data.prompt_field": "null",
        "--data.target_field": "null",
        "--data.task": "addition",
        "--data.target_format": "plain",
        "--data.batch_size": 8,
    }
    if not real_model:  # the local tokenizer has no chat template
        flags.update({"--module.chat_template": "false", "--module.system_prompt": "null"})
    config = str(REPO / "configs" / "grpo_gsm8k_qwen3_1_7b.yaml")
    return ["fit", "--config", config] + [str(x) for kv in flags.items() for x in kv]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--model", default=None)
    parser.add_argument("--out", default=str(REPO / "runs" / "gpu_check"))
    args = parser.parse_args()
    check_environment()

    from rlforge.cli import run

    out = Path(args.out)
    model = args.model or random_qwen3_1_7b(out / "random-qwen3-1.7b")
    start = time.perf_counter()
    run(fit_args(model, out, args.steps, real_model=args.model is not None))
    wall = time.perf_counter() - start
    (metrics,) = sorted(out.glob("rlforge/version_*/metrics.csv"))[-1:]
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("perf/step_s")]
    steady = rows[1:] or rows  # the first step includes warm-up (CUDA graphs, allocator)

    def median(key: str) -> float:
        values = [float(r[key]) for r in steady if r.get(key)]
        return statistics.median(values) if values else float("nan")

    print(f"gpu_check: {len(rows)} steps in {wall:.0f} s wall (incl. engine start), metrics in {metrics}")
    print(f"  tokens/s (batch tokens / step time): {median('perf/tokens_per_s'):.0f}")
    print(
        f"  step time: {median('perf/step_s'):.2f} s  (rollout {median('perf/rollout_s'):.2f} s, "
        f"update {median('perf/train_s'):.2f} s)"
    )
    print(f"  weight sync time (titan -> vLLM): {median('perf/sync_s'):.2f} s")


if __name__ == "__main__":
    main()
