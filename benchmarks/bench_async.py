"""Steps per second of ``MonarchStrategy`` with synchronous (``max_staleness=0``) vs async (``1``) rollouts.

Same config (the default task and module, validation off), both sides in this process, runs interleaved
0/1/0/1; the first ``--warmup`` steps of each run are not timed. Prints median step time, steps/s and
the ratio::

    python benchmarks/bench_async.py --steps 40 --repeats 2

With ``max_staleness=1`` the rollout of step k+1 samples in the generator process while step k trains,
so a step costs about ``max(rollout, update)`` instead of ``rollout + update`` -- when the two have their
own compute. By default each process gets one torch thread (one core each, as a generator and a trainer
have their own GPUs); with both processes using every core of a small CPU host there is nothing to overlap
into (``--num-threads 2 --trainer-threads 2`` on 2 cores measured 0.77x).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from rlforge import Callback, GRPOModule, RLDataModule, RLTrainer
from rlforge.strategies import MonarchStrategy


class _StepClock(Callback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_step_end(self, trainer, module, metrics) -> None:
        self.ends.append(time.perf_counter())


def run(max_staleness: int, correction: str, steps: int, warmup: int, num_threads: int | None) -> float:
    """Median seconds per step after ``warmup`` steps."""
    clock = _StepClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = RLTrainer(
            max_steps=steps,
            strategy=MonarchStrategy(max_staleness=max_staleness, correction=correction, num_threads=num_threads),
            callbacks=[clock],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            val_check_interval=0,
            default_root_dir=root,
        )
        trainer.fit(GRPOModule(), RLDataModule())
    gaps = [b - a for a, b in zip(clock.ends[warmup:], clock.ends[warmup + 1 :], strict=False)]
    return statistics.median(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads of the generator process")
    parser.add_argument("--trainer-threads", type=int, default=1, help="torch threads of the trainer process")
    args = parser.parse_args()
    torch.set_num_threads(args.trainer_threads)
    print(f"trainer threads={args.trainer_threads}, generator threads={args.num_threads}")
    sides = {"sync (max_staleness=0)": (0, "tis"), "async tis (1)": (1, "tis"), "async ppo (1)": (1, "ppo")}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, (staleness, correction) in sides.items():
            times[name].append(run(staleness, correction, args.steps, args.warmup, args.num_threads))
    sync_s = statistics.median(times["sync (max_staleness=0)"])
    print(f"{'side':>24} {'s/step':>8} {'steps/s':>8} {'vs sync':>8}")
    for name, runs in times.items():
        step_s = statistics.median(runs)
        runs_s = [round(t, 3) for t in runs]
        print(f"{name:>24} {step_s:>8.3f} {1 / step_s:>8.2f} {sync_s / step_s:>7.2f}x   runs {runs_s}")


if __name__ == "__main__":
    main()
