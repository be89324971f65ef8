"""The no-grad logprob forward (reference model, proximal policy): eager vs ``compile=True``, in one process.

Both sides score the same rollout batch of ``bench_grpo_step.py`` (8 prompts x 8 samples, 32 new tokens, the
random policy, so responses run long), alternated call by call; medians after the compile::

    python benchmarks/bench_reference.py --threads 1 2 --repeats 15
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_grpo_step, run as a script or imported
from bench_grpo_step import build_rlforge, random_policy  # noqa: E402

from rlforge.models import compute_logprobs  # noqa: E402
from rlforge.types import TrainBatch  # noqa: E402


def forward_args(doc: str) -> argparse.ArgumentParser:
    """The options of a forward benchmark on one rollout batch: ``--threads``, ``--repeats``, ``--seed``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    return parser


@contextlib.contextmanager
def random_rollout(seed: int) -> Iterator[tuple[nn.Module, TrainBatch, str]]:
    """The random policy, one rollout batch of ``bench_grpo_step.py``'s trainer, and the policy's folder."""
    with tempfile.TemporaryDirectory() as folder:
        trainer = build_rlforge(random_policy(folder, seed), seed)
        _, batch = trainer.rollout.next(0)
        yield trainer.module.policy, batch, folder


def main() -> None:
    args = forward_args(__doc__).parse_args()
    with random_rollout(args.seed) as (policy, batch, _):
        inputs = (policy, batch.input_ids, batch.attention_mask, batch.prompt_len, 1.0)
        shape, params = tuple(batch.input_ids.shape), policy.num_parameters()
        print(f"batch {shape}, prompt width {batch.prompt_len}, {params} parameters")
        print(f"{'threads':>7} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6}")
        with torch.no_grad():
            start = time.perf_counter()
            compute_logprobs(*inputs, compile=True)
            print(f"first compiled call (compiles): {time.perf_counter() - start:.1f} s")
            for threads in args.threads:
                torch.set_num_threads(threads)
                times: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(args.repeats):
                    for compiled in (False, True):
                        start = time.perf_counter()
                        compute_logprobs(*inputs, compile=compiled)
                        times[compiled].append(time.perf_counter() - start)
                eager, fast = (statistics.median(times[c]) * 1e3 for c in (False, True))
                print(f"{threads:>7} {eager:>9.1f} {fast:>12.1f} {eager / fast:>6.2f}")


if __name__ == "__main__":
    main()
