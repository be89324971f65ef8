"""The evidence behind ``rlforge fit``'s learning defaults: rlforge alone, one warm start, several settings.

Each run is ``GRPOModule`` + ``RLTrainer`` (what ``rlforge fit`` builds) from the same warm start (the shipped
policy for ``addition``, a cached ``SFTModule`` run otherwise; ``bench_learning.warm_start``) with one setting
changed, scored every ``--eval-every`` steps by ``bench_learning.greedy_accuracy`` on the same held-out rows::

    python benchmarks/sweep_defaults.py --tasks max reverse:300 --lrs 1e-5 3e-5 1e-4
    python benchmarks/sweep_defaults.py --tasks reverse:150 --lrs 1e-4 --warmup 20 --aggregation token-mean

A task is ``name`` or ``name:sft_steps``. Every run prints one markdown row (accuracy at each evaluation); run
several processes side by side with ``--threads 1`` to use more cores.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_grpo_step import build_rlforge  # noqa: E402
from bench_learning import RUNS_DIR, SFT_STEPS, greedy_accuracy, warm_start  # noqa: E402

from rlforge.data.tasks import make_task  # noqa: E402
from rlforge.losses import GRPOLoss  # noqa: E402


def run(task: str, policy: str, args: argparse.Namespace, lr: float, warmup: int, aggregation: str) -> list[float]:
    """Train ``args.steps`` steps with one setting; greedy accuracy at step 0 and every ``args.eval_every``."""
    loss = GRPOLoss(beta=args.beta, clip_low=args.clip_low, clip_high=args.clip_high, aggregation=aggregation)
    trainer = build_rlforge(
        policy, args.seed, prompts=args.prompts, group=args.group, new_tokens=args.new_tokens, task=task, lr=lr,
        loss=loss, root=RUNS_DIR.name, temperature=args.temperature, warmup_steps=warmup,
    )  # fmt: skip
    module = trainer.module
    rows = make_task(task, seed=args.seed).val[: args.val_rows]
    accuracy = [greedy_accuracy(module.policy, module.tokenizer, rows, args.new_tokens)]
    while trainer.global_step < args.steps:
        trainer.run_step()
        if trainer.global_step % args.eval_every == 0:
            accuracy.append(greedy_accuracy(module.policy, module.tokenizer, rows, args.new_tokens))
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["max", "reverse:300"], help="name or name:sft_steps")
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-4])
    parser.add_argument("--warmup", nargs="+", type=int, default=[0], help="module.warmup_steps values")
    parser.add_argument("--aggregation", nargs="+", default=["seq-mean-token-mean"])
    parser.add_argument("--clip-low", type=float, default=0.2)
    parser.add_argument("--clip-high", type=float, default=0.2)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0, help="rollout sampling temperature")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--val-rows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/rlforge/bench_learning"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    steps = range(0, args.steps + 1, args.eval_every)
    print(
        f"load {os.getloadavg()}; {args.prompts} prompts x {args.group}, {args.new_tokens} new tokens, temperature "
        f"{args.temperature}, clip {args.clip_low}/{args.clip_high}, beta {args.beta}, seed {args.seed}",
        flush=True,
    )
    print("| task (warm start) | lr | warm-up | aggregation | " + " | ".join(map(str, steps)) + " | s |", flush=True)
    for spec, lr, warmup, aggregation in itertools.product(args.tasks, args.lrs, args.warmup, args.aggregation):
        task, _, sft = spec.partition(":")
        sft_steps = int(sft) if sft else SFT_STEPS.get(task, 100)
        policy = warm_start(task, Path(args.cache_dir), sft_steps, args.seed)
        begin = time.perf_counter()
        accuracy = run(task, policy, args, lr, warmup, aggregation)
        start = "shipped" if task == "addition" else f"SFT {sft_steps}"
        cells = " | ".join(f"{a:.3f}" for a in accuracy)
        print(f"| {task} ({start}) | {lr:g} | {warmup} | {aggregation} | {cells} | {time.perf_counter() - begin:.0f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
