"""One process vs ``torchrun --nproc_per_node 2``: seconds per GRPO step and bytes synchronised per step.

Both sides run ``rlforge fit`` on the default policy and task with the same global batch (``data.batch_size``
prompts x ``group_size``), validation off, interleaved 1/2/1/2; the first ``--warmup`` steps of each run are not
timed. Prints the median ``perf/step_s`` of each side and the ratio::

    python benchmarks/bench_data_parallel.py --steps 12 --repeats 2

Bytes per step are what FSDP2 moves for one optimizer step with ``W`` ranks and ``P`` parameters of ``b`` bytes
(``reshard_after_forward``: the parameters are all-gathered for the forward and again for the backward, the
gradients reduce-scattered), ``3 (W-1)/W P b`` received per rank, plus the gather of the full weights for the
generator at each sync, ``(W-1)/W P b``. On a 2-core CPU host two ranks share the cores one process already uses,
so data parallelism is not expected to be faster here; it pays where each rank has its own GPU.
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rlforge.models import load_policy

REPO = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ranks: int, steps: int, warmup: int, batch_size: int, group_size: int) -> float:
    """Median seconds per step of one ``rlforge fit`` after ``warmup`` steps."""
    with tempfile.TemporaryDirectory() as root:
        flags = [
            "fit", "--trainer.max_steps", str(steps), "--trainer.default_root_dir", root,
            "--trainer.enable_progress_bar", "false", "--trainer.val_check_interval", "0",
            "--trainer.enable_checkpointing", "false", "--data.batch_size", str(batch_size),
            "--module.group_size", str(group_size), "--trainer.sampling_seeds", "group",
        ]  # fmt: skip
        launcher = [sys.executable, "-m", "rlforge"]
        if ranks > 1:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks)]
            launcher += ["--master_addr", "127.0.0.1", "--master_port", str(_port()), "-m", "rlforge"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(max(1, os.cpu_count() // ranks))}
        subprocess.run([*launcher, *flags], cwd=REPO, env=env, check=True, capture_output=True, text=True)
        (metrics,) = Path(root).glob("rlforge/version_*/metrics.csv")
        with open(metrics) as f:
            times = [float(r["perf/step_s"]) for r in csv.DictReader(f) if r.get("perf/step_s")]
    return statistics.median(times[warmup:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    params = sum(p.numel() * p.element_size() for p in load_policy("rlforge/default-policy")[0].parameters())
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for ranks in (1, 2):
            times[ranks].append(run(ranks, args.steps, args.warmup, args.batch_size, args.group_size))
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; policy {params / 1e6:.2f} MB")
    print(f"1 process: {one:.3f} s/step   2 ranks: {two:.3f} s/step   speed-up 2 ranks / 1: {one / two:.2f}x")
    fsdp, sync = 3 * 0.5 * params, 0.5 * params
    print(f"bytes received per rank per step (2 ranks): FSDP2 {fsdp / 1e6:.2f} MB + generator sync {sync / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
