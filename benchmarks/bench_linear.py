"""A projection's three products, ``torch`` (``F.linear`` and its autograd: MKL on x86) vs ``rlforge.generation.linear``
(oneDNN), at the default policy's training and decode shapes, alternated in one process::

    python benchmarks/bench_linear.py --threads 1 2

For each shape (rows x in -> out) and side it prints the median microseconds of the forward and of the forward +
backward (input and weight gradients), GFLOP/s and the ratio torch / rlforge (higher = rlforge faster). The rlforge
side runs oneDNN whatever this CPU's default (``onednn_projections(True)``): the first line says the default.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from rlforge.generation.linear import cpu_family, cpu_vendor, linear, onednn_active, onednn_projections, uses_onednn

# hidden 128 / intermediate 384 / vocab 268 (the default policy); 1920 rows: a GRPO step's packed response tokens
# (~1890, padded to their bucket), 256: a small batch's, 64: a decode step of 64 rows; 576 / 1536: SmolLM2-135M's
# hidden / intermediate sizes. Row counts are buckets (``padded_rows``): oneDNN sees no others.
SHAPES = [
    (1920, 128, 384),
    (1920, 384, 128),
    (1920, 128, 268),
    (256, 128, 384),
    (64, 128, 384),
    (64, 384, 128),
    (512, 576, 1536),
]


def median_us(fn, repeats: int) -> float:
    """Median microseconds of ``fn()`` over ``repeats`` rounds of a few calls each (after a warm-up)."""
    for _ in range(5):
        fn()
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(5):
            fn()
        rounds.append((time.perf_counter() - start) / 5 * 1e6)
    return statistics.median(rounds)


def time_side(fn, x: torch.Tensor, weight: torch.Tensor, upstream: torch.Tensor | None, repeats: int) -> float:
    """Median microseconds of ``fn(x, weight)``, with its backward from ``upstream`` when given."""
    if upstream is not None:
        return median_us(lambda: fn(x, weight).backward(upstream), repeats)
    with torch.no_grad():
        return median_us(lambda: fn(x, weight), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    default = onednn_active(torch.device("cpu"), torch.float32)
    vendor, family = cpu_vendor() or "unknown", cpu_family()
    print(f"CPU vendor {vendor}, family {family}: oneDNN projections by default here: {'yes' if default else 'no'}")
    with onednn_projections(True):
        run(args.threads, args.repeats)


def run(thread_counts: list[int], repeats: int) -> None:
    """Prints one table per thread count (see the module docstring)."""
    for threads in thread_counts:
        torch.set_num_threads(threads)
        print(f"threads {threads}: median us (GFLOP/s); ratio = torch / rlforge")
        print(
            f"  {'rows x in -> out':<22} {'fwd torch':>16} {'fwd rlforge':>16} {'ratio':>6} "
            f"{'fwd+bwd torch':>16} {'fwd+bwd rlforge':>16} {'ratio':>6}"
        )
        for rows, k, n in SHAPES:
            x, weight = torch.randn(rows, k, requires_grad=True), torch.randn(n, k, requires_grad=True)
            upstream = torch.randn(rows, n)
            if not uses_onednn(x, weight):
                print(f"  {rows} x {k} -> {n}: oneDNN not used here (platform, torch build or a switch)")
                continue
            flops = 2 * rows * k * n
            cells = []
            for train in (False, True):
                times = {}
                for side, fn in (("torch", F.linear), ("rlforge", linear)):
                    times[side] = time_side(fn, x, weight, upstream if train else None, repeats)
                work = flops * (3 if train else 1) / 1e3
                cells += [f"{times[s]:7.0f} ({work / times[s]:4.0f})" for s in ("torch", "rlforge")]
                cells.append(f"{times['torch'] / times['rlforge']:5.2f}x")
            print(f"  {f'{rows} x {k} -> {n}':<22} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
