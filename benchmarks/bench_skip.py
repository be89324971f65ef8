"""What ``GRPOModule(skip_zero_advantage=True)`` saves: the same GRPO step with and without it, in one process.

Two rlforge trainers of ``bench_grpo_step.py`` (8 prompts x 8 samples, 32 new tokens, beta 0, the ``grpo`` loss)
with the same seed, so the same rollouts, stepped alternately; one leaves the rows whose advantage is 0 (groups
whose rewards are all equal) out of its update. Their updates are equal up to fp32 summation order
(``tests/test_grpo.py``), so the saving is all in the update's forward + backward::

    python benchmarks/bench_skip.py --threads 1 --steps 10 --warmup 2 [--compile]

Policies: ``default`` (the bundled policy, trained on ``addition``; on ``reverse`` and ``max``, tasks it never saw,
most groups are all wrong, like a weak warm start on a new task) and ``random`` (a random init: every reward 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_grpo_step, run as a script or imported
from bench_grpo_step import build_rlforge, random_policy  # noqa: E402

from rlforge.models import DEFAULT_POLICY  # noqa: E402

SIDES = ("all rows", "skip")


def compare(policy: str, task: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Medians of step seconds, update seconds (``perf/train_s``) and skipped share per side."""
    trainers = {
        side: build_rlforge(policy, args.seed, task=task, compile=args.compile, skip_zero_advantage=side == "skip")
        for side in SIDES
    }
    seen: dict[str, dict[str, list[float]]] = {side: {"step": [], "update": [], "skipped": []} for side in SIDES}
    for i in range(args.warmup + args.steps):
        for side, trainer in trainers.items():
            start = time.perf_counter()
            trainer.run_step()
            if i >= args.warmup:
                metrics = trainer.callback_metrics
                seen[side]["step"].append(time.perf_counter() - start)
                seen[side]["update"].append(metrics["perf/train_s"])
                seen[side]["skipped"].append(metrics.get("train/skipped_rows_frac", 0.0))
    return {side: {k: statistics.median(v) for k, v in values.items()} for side, values in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", nargs="+", default=["default:addition", "default:reverse", "random:addition"], help="policy:task"
    )
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="training forward and decode compiled on both sides")
    args = parser.parse_args()
    print(f"torch {torch.__version__}; medians of {args.steps} steps; compiled: {args.compile}")
    print(f"{'policy:task':>16} {'threads':>7} {'skipped':>7} {'step s':>7} {'skip':>7} {'ratio':>6}", end="")
    print(f" {'update s':>8} {'skip':>7} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        paths = {"default": DEFAULT_POLICY, "random": random_policy(folder, args.seed)}
        for run in args.runs:
            policy, task = run.split(":")
            for threads in args.threads:
                torch.set_num_threads(threads)
                full, skip = compare(paths[policy], task, args).values()
                row = f"{run:>16} {threads:>7} {skip['skipped']:>7.2f} {full['step']:>7.3f} {skip['step']:>7.3f}"
                row += f" {full['step'] / skip['step']:>6.2f} {full['update']:>8.3f} {skip['update']:>7.3f}"
                print(row + f" {full['update'] / skip['update']:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
