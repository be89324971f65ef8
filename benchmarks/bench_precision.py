"""Would bf16 mixed precision speed up the training step on CPU? fp32 vs ``torch.autocast(bfloat16)``, in one process.

The GRPO step's GEMMs run at fp32 peak (see benchmarks/README.md), so bf16 is the one lever left on CPUs with
AMX. This script measures it where it would act: the packed training forward + backward of one rollout batch of
``bench_grpo_step.py`` (8 prompts x 8 samples, 32 new tokens, the random policy), eager and compiled, ``precision``
``32-true`` and ``bf16-mixed``, alternated call by call; ``torch.mm`` alone at the forward's GEMM shapes; and the
whole compiled GRPO step of ``bench_grpo_step.py`` at each precision (the sampler stays fp32 in both)::

    python benchmarks/bench_precision.py --threads 1 2 --repeats 15 --steps 10

A ratio above 1 means bf16 is faster. The last column is the largest logprob difference to fp32.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_grpo_step, run as a script or imported
from bench_grpo_step import build_rlforge  # noqa: E402
from bench_reference import forward_args, random_rollout  # noqa: E402

from rlforge.models import compute_logprobs  # noqa: E402

SIDES = ("fp32", "bf16", "fp32 compiled", "bf16 compiled")


def forward_backward(policy, batch, side: str) -> torch.Tensor:
    """Logprobs of the batch and their backward (what a training step runs), at the side's ``precision``."""
    precision = "bf16-mixed" if side.startswith("bf16") else "32-true"
    compile = side.endswith("compiled")
    inputs = (policy, batch.input_ids, batch.attention_mask, batch.prompt_len, 1.0)
    logprobs, _ = compute_logprobs(*inputs, compile=compile, precision=precision)
    logprobs.sum().backward()
    policy.zero_grad(set_to_none=True)
    return logprobs.detach()


def mm_rates(rows: int, hidden: int, inner: int, repeats: int) -> dict[torch.dtype, float]:
    """GFLOP/s of ``torch.mm`` at the MLP's up projection ``[rows, hidden] x [hidden, inner]``."""
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(rows, hidden, dtype=dtype), torch.randn(hidden, inner, dtype=dtype)
        for _ in range(5):
            a @ b
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        rates[dtype] = 2 * rows * hidden * inner * repeats / (time.perf_counter() - start) / 1e9
    return rates


def step_times(folder: str, seed: int, steps: int) -> dict[str, float]:
    """Median seconds of a whole compiled GRPO step (``bench_grpo_step.py``'s rlforge side) per precision, two
    trainers in this process stepped alternately after 3 warm-up steps each (which absorb the compiles)."""
    trainers = {p: build_rlforge(folder, seed, compile=True, precision=p) for p in ("32-true", "bf16-mixed")}
    times: dict[str, list[float]] = {p: [] for p in trainers}
    for i in range(3 + steps):
        for precision, trainer in trainers.items():
            start = time.perf_counter()
            trainer.run_step()
            if i >= 3:
                times[precision].append(time.perf_counter() - start)
    return {p: statistics.median(t) for p, t in times.items()}


def main() -> None:
    parser = forward_args(__doc__)
    parser.add_argument("--steps", type=int, default=10, help="timed GRPO steps per precision (0 skips them)")
    args = parser.parse_args()
    with random_rollout(args.seed) as (policy, batch, folder):
        config, rows = policy.config, int(batch.attention_mask[:, batch.prompt_len :].sum())
        print(f"batch {tuple(batch.input_ids.shape)}, {rows} response tokens, {policy.num_parameters()} parameters")
        reference = forward_backward(policy, batch, "fp32")
        error = {side: (forward_backward(policy, batch, side) - reference).abs().max().item() for side in SIDES}
        print(f"{'threads':>7} " + " ".join(f"{s + ' ms':>16}" for s in SIDES), end="")
        print(f" {'bf16/fp32':>9} {'compiled':>9} {'mm fp32':>8} {'mm bf16':>8} GFLOP/s")
        for threads in args.threads:
            torch.set_num_threads(threads)
            times: dict[str, list[float]] = {side: [] for side in SIDES}
            for _ in range(args.repeats):
                for side in SIDES:
                    start = time.perf_counter()
                    forward_backward(policy, batch, side)
                    times[side].append(time.perf_counter() - start)
            ms = {side: statistics.median(t) * 1e3 for side, t in times.items()}
            rates = mm_rates(rows, config.hidden_size, config.intermediate_size, 200)
            line = f"{threads:>7} " + " ".join(f"{ms[s]:>16.1f}" for s in SIDES)
            line += f" {ms['fp32'] / ms['bf16']:>9.2f} {ms['fp32 compiled'] / ms['bf16 compiled']:>9.2f}"
            print(line + f" {rates[torch.float32]:>8.0f} {rates[torch.bfloat16]:>8.0f}")
        print("max |logprob - fp32|: " + ", ".join(f"{s} {error[s]:.1e}" for s in SIDES[1:]))
        for threads in args.threads if args.steps else []:
            torch.set_num_threads(threads)
            step = step_times(folder, args.seed, args.steps)
            fp32, bf16 = step["32-true"], step["bf16-mixed"]
            print(f"compiled GRPO step, {threads} thread(s): 32-true {fp32:.3f} s, ", end="")
            print(f"bf16-mixed {bf16:.3f} s, {fp32 / bf16:.2f}x")


if __name__ == "__main__":
    main()
