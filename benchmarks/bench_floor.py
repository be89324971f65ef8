"""Where the compiled GRPO step's time goes, and the floor under it, measured on this machine in one run.

The issue's headline comparison (``bench_grpo_step.py``: random policy, 8 prompts x 8 samples, 32 new tokens,
fp32, rlforge compiled vs TRL ``GRPOTrainer``, stepped alternately), then:

1. the step's matmul FLOPs: an eager rlforge trainer with the same seed (so the same rollouts, up to rare sampling
   flips between eager and compiled numerics) runs the same steps under ``torch.utils.flop_counter.FlopCounterMode``
   (weight GEMMs, and attention through a formula for CPU SDPA registered here);
2. the best fp32 GEMM rate this CPU reaches (``torch.mm`` alone at the policy's training and decode shapes);
3. a ``torch.profiler`` split of compiled steps (inductor's kernel profiling on): matmuls, attention, inductor's
   fused kernels, other ATen ops, and the rest (dynamo and AOT wrappers, the autograd engine, Python).

It prints the floor (every matmul FLOP at the best GEMM rate, everything else free) as a ratio to TRL, and what a
3.0x step would leave for everything but the matmuls at the rate they run in the step::

    python benchmarks/bench_floor.py --threads 1 --steps 8 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_grpo_step, run as a script or imported
from bench_grpo_step import build_rlforge, random_policy, time_pair  # noqa: E402

from rlforge.generation.linear import linear, padded_rows  # noqa: E402
from rlforge.models import load_policy  # noqa: E402

TARGET = 3.0
WEIGHT_GEMMS = {"mm", "addmm", "_linear_pointwise", "onednn_linear", "onednn_linear_add"}  # projections, LM head
# The decode step's attention over its cache: rlforge's CPU kernels (``rlforge::decode_scores``/``decode_mix``), or
# ``torch.bmm`` without them (training runs SDPA).
ATTENTION_MATMULS = {"bmm", "baddbmm", "decode_scores", "decode_mix"}


def matmul_kind(name: str) -> str | None:
    """``"weight GEMMs"``, ``"attention"`` or ``None`` for an op named as ``FlopCounterMode`` names it (``mm``) or
    as the profiler does (``aten::mm``; ``aoti_torch_cpu_mm_out`` from an inductor graph's C++ wrapper: the decode)."""
    # oneDNN's GEMMs (``rlforge.generation.linear``): ``mkldnn::_linear_pointwise``, ``rlforge::onednn_linear``.
    op = name.split("::")[-1].split(".")[0].removeprefix("aoti_torch_cpu_").removesuffix("_out")
    if op in WEIGHT_GEMMS:
        return "weight GEMMs"
    if op in ATTENTION_MATMULS or "scaled_dot_product" in op:
        return "attention"
    return None


CATEGORIES = ("weight GEMMs", "attention", "fused kernels", "other ops", "wrappers, autograd, Python")


def _attention_flops(query_shape, key_shape) -> int:
    """Forward FLOPs of SDPA: ``q @ k^T`` and ``p @ v`` for every query head (GQA shares key heads)."""
    batch, heads, queries, dim = query_shape
    return 2 * 2 * batch * heads * queries * key_shape[-2] * dim


def register_cpu_attention_flops() -> None:
    """Counts CPU SDPA in ``FlopCounterMode`` (torch registers its GPU kernels only): forward 2 matmuls, backward 5."""

    @register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu)
    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return _attention_flops(query_shape, key_shape)

    @register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return _attention_flops(query_shape, key_shape) * 5 // 2


def step_flops(policy: str, seed: int, warmup: int, steps: int) -> list[dict[str, float]]:
    """Matmul FLOPs of each timed step of an eager trainer with ``seed``: ``gemm`` (the weights'), ``attention``, and
    ``tokens`` (response tokens).

    The projections run through ``torch.mm`` here (oneDNN off), whose FLOPs ``FlopCounterMode`` knows: the same
    products as the oneDNN ones the timed steps run.
    """
    trainer = build_rlforge(policy, seed)
    out = []
    for i in range(warmup + steps):
        counter = FlopCounterMode(display=False)
        with counter, torch.backends.mkldnn.flags(enabled=False):
            trainer.run_step()
        counts = counter.get_flop_counts()["Global"]
        gemm = sum(n for op, n in counts.items() if matmul_kind(op.__name__) == "weight GEMMs")
        attention = sum(n for op, n in counts.items() if matmul_kind(op.__name__) == "attention")
        tokens = trainer.callback_metrics["perf/tokens_per_s"] * trainer.callback_metrics["perf/step_s"]
        if i >= warmup:
            out.append({"gemm": gemm, "attention": attention, "tokens": tokens})
    return out


def best_gemm_rate(policy: str, rows: int, repeats: int = 20) -> tuple[float, str]:
    """The highest fp32 GFLOP/s of ``torch.mm`` and of oneDNN's linear over the policy's projection shapes at
    ``rows`` (training) and 64 (decode) rows, with the library and shape that reached it."""
    config = load_policy(policy)[0].config
    hidden, inner = config.hidden_size, config.intermediate_size
    best, where = 0.0, ""
    rows = padded_rows(rows)  # oneDNN runs bucketed row counts only (the packed stream is padded to one)
    for m, k, n in [(rows, hidden, inner), (rows, inner, hidden), (rows, hidden, hidden), (64, hidden, inner)]:
        a, weight = torch.randn(m, k), torch.randn(n, k)
        for library, product in [("torch.mm", torch.mm), ("oneDNN", linear)]:
            rate = _gemm_rate(product, a, weight if product is linear else weight.t().contiguous(), repeats)
            if rate > best:
                best, where = rate, f"{library}, [{m}, {k}] x [{k}, {n}]"
    return best, where


def _gemm_rate(product, a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    """GFLOP/s of ``product(a, b)``, a ``[m, k]`` by ``[k, n]`` product (``b`` as ``product`` takes it)."""
    for _ in range(3):
        product(a, b)
    start = time.perf_counter()
    for _ in range(repeats):
        product(a, b)
    m, k = a.shape
    return 2 * m * k * b.numel() // k * repeats / (time.perf_counter() - start) / 1e9


def categorise(name: str) -> str | None:
    """The ``CATEGORIES`` entry of a profiler event's own time (``None``: counted in the rest)."""
    if "cpp_fused" in name:  # inductor's kernels, some named after the SDPA they fuse around
        return "fused kernels"
    if kind := matmul_kind(name):
        return kind
    if name.startswith(("aten::", "aoti_torch_")):
        return "other ops"
    return None


def profile_compiled(policy: str, seed: int, warmup: int, steps: int, top: int = 5) -> dict:
    """Milliseconds per compiled step in each of ``CATEGORIES`` (self CPU time, ``split``), the profiled wall ms per
    step (``wall``) and the ``top`` events by own time per category (``top``; the rest's are wrapper events).

    Call it in a fresh process: the kernel profiling flag only reaches graphs compiled after it is set, and dynamo
    reuses a function's graphs for the whole process.
    """
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    inductor_config.cpp.enable_kernel_profile = True  # each fused kernel a profiler event
    trainer = build_rlforge(policy, seed, compile=True)
    for _ in range(warmup):
        trainer.run_step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            trainer.run_step()
        wall = (time.perf_counter() - start) * 1e3 / steps
    split = dict.fromkeys(CATEGORIES, 0.0)
    events: dict[str, list[tuple[float, str]]] = {c: [] for c in CATEGORIES}
    for event in prof.key_averages():
        category = categorise(event.key)
        ms = event.self_cpu_time_total / 1e3 / steps
        if category is not None:
            split[category] += ms
        events[category or CATEGORIES[-1]].append((ms, event.key))
    split[CATEGORIES[-1]] = wall - sum(split[c] for c in CATEGORIES[:-1])
    return {"split": split, "wall": wall, "top": {c: sorted(e, reverse=True)[:top] for c, e in events.items()}}


def profile_in_child(policy: str, args: argparse.Namespace) -> dict:
    """``profile_compiled`` in a child process (same threads, seed and steps), read back as JSON."""
    cmd = [sys.executable, __file__, "--threads", str(args.threads), "--warmup", str(args.warmup)]
    cmd += ["--profile-steps", str(args.profile_steps), "--seed", str(args.seed), "--top", str(args.top)]
    out = subprocess.run([*cmd, "--profile-child", policy], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first (absorb the compiles)")
    parser.add_argument("--profile-steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=5, help="biggest profiler events shown per category")
    parser.add_argument("--profile-child", metavar="POLICY", help=argparse.SUPPRESS)  # internal: profile_in_child
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile_child:
        print(json.dumps(profile_compiled(args.profile_child, args.seed, args.warmup, args.profile_steps, args.top)))
        return
    register_cpu_attention_flops()

    with tempfile.TemporaryDirectory() as folder:
        policy = random_policy(folder, args.seed)
        t = time_pair(policy, args.threads, args.steps, args.warmup, args.seed, compiled=True)
        flops = step_flops(policy, args.seed, args.warmup, args.steps)
        gemm = statistics.median(f["gemm"] for f in flops) / 1e9
        attention = statistics.median(f["attention"] for f in flops) / 1e9
        tokens = statistics.median(f["tokens"] for f in flops)
        rate, shape = best_gemm_rate(policy, int(tokens))
        profiled = profile_in_child(policy, args)

    trl, ours = t["trl"], t["compiled"]
    floor = (gemm + attention) / rate
    print(f"threads {args.threads}; medians of {args.steps} steps after {args.warmup}; random policy, fp32")
    print(f"TRL {trl:.3f} s/step; rlforge compiled {ours:.3f} s/step ({trl / ours:.2f}x), eager {t['rlforge']:.3f}")
    print(f"matmul work per step ({tokens:.0f} tokens): {gemm:.2f} GFLOP in GEMMs + {attention:.2f} in attention")
    print(f"best fp32 GEMM rate here: {rate:.0f} GFLOP/s ({shape}); all matmuls at it: {floor * 1e3:.0f} ms")
    split, wall = profiled["split"], profiled["wall"]
    print(f"compiled step under the profiler, {wall:.0f} ms per step (ms, share; then its biggest events by own time):")
    for category in CATEGORIES:
        print(f"  {category:<28} {split[category]:7.1f}  {split[category] / wall:6.1%}")
        for ms, name in profiled["top"][category]:
            print(f"      {ms:7.1f}  {name[:90]}")
    budget = trl / TARGET * 1e3 * wall / (ours * 1e3)  # the 3.0x step, in profiled milliseconds
    matmul = split["weight GEMMs"] + split["attention"]
    print(
        f"{TARGET:.1f}x TRL is {trl / TARGET * 1e3:.0f} ms/step ({budget:.0f} profiled ms): matmuls and attention "
        f"as they run take {matmul:.0f}, leaving {budget - matmul:.0f} for the rest, which takes {wall - matmul:.0f}"
    )
    print(f"floor ratio (every matmul FLOP at the best GEMM rate, nothing else): {trl / floor:.2f}x")


if __name__ == "__main__":
    main()
