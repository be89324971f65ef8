"""Where a decode step's time goes as the cache grows: rlforge's compiled step vs HF ``generate``, per step.

``bench_generate.py`` times whole generations (prefill + 128 steps at one prompt length). This script separates
the decode step from the prefill and from the context length, in one process:

1. seconds per decode step at several prompt lengths, for rlforge (``TorchGenerator(compile=True)``, its decode
   attention in rlforge's CPU kernels), the same with ``cpu_kernels=False`` (attention through ``torch.bmm``) and HF
   ``generate``: a generation of ``2 + steps`` tokens minus one of 2 tokens, divided by ``steps``, so the prefill
   cancels; the sides alternate call by call;
2. a least-squares line through each rlforge side's points, ``step = fixed + per_column * span`` (``span``: cached
   columns a step attends to, on average), splitting the step into work that does not grow with the cache (weight GEMMs,
   norms, sampling, the call) and the attention's reads of the key/value cache;
3. the two floors under them, measured here: the step's weight GEMMs alone (``torch.mm`` at its shapes), and the
   cache bytes a column adds per step (keys and values of every layer and row) at this CPU's streaming-read rate
   (``torch.sum`` over a buffer larger than the last-level cache)::

    python benchmarks/bench_decode_floor.py --threads 1 --batch 64 --prompt-lens 4 64 192 320

EOS is disabled and sampling is plain temperature 1 on both sides, as in ``bench_generate.py``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_generate, run as a script or imported
from bench_generate import hf_generate, tiny_model  # noqa: E402
from scaling_report import load, machine  # noqa: E402

from rlforge.generation import SamplingParams, TorchGenerator  # noqa: E402
from rlforge.generation.layers import Heads  # noqa: E402

BYTES = 4  # fp32 cache


def per_step_seconds(run, steps: int) -> float:
    """Seconds per decode step: ``(time of run(2 + steps) - time of run(2)) / steps`` (the prefill cancels)."""
    start = time.perf_counter()
    run(2)
    short = time.perf_counter() - start
    start = time.perf_counter()
    run(2 + steps)
    return (time.perf_counter() - start - short) / steps


def weight_gemm_seconds(model, batch: int, repeats: int = 200) -> float:
    """Median time of one decode step's weight GEMMs alone: every linear of the model at ``batch`` rows."""
    weights = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(batch, w.shape[1]) for w in weights]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for x, w in zip(inputs, weights, strict=True):
            torch.mm(x, w.t())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def streaming_read_rate(megabytes: int = 256, repeats: int = 20) -> float:
    """Bytes/s of ``torch.sum`` over a fp32 buffer of ``megabytes`` (well past the last-level cache)."""
    buffer = torch.randn(megabytes * 2**20 // BYTES)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - start)
    return megabytes * 2**20 / statistics.median(times)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``ys`` on ``xs``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt-lens", type=int, nargs="+", default=[4, 64, 192, 320])
    parser.add_argument("--steps", type=int, default=64, help="decode steps timed per generation")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if len(args.prompt_lens) < 2:
        parser.error("--prompt-lens needs at least two lengths to fit a line")
    torch.set_num_threads(args.threads)

    model, tokenizer = tiny_model(max(args.prompt_lens) + args.steps + 8)
    generators = {
        "kernels": TorchGenerator(model, tokenizer, seed=0, compile=True),
        "bmm": TorchGenerator(model, tokenizer, seed=0, compile=True, cpu_kernels=False),
    }
    for generator in generators.values():
        generator.eos_token_ids = [-1]
    config, heads = model.config, Heads.of(model.config)
    column_bytes = 2 * config.num_hidden_layers * args.batch * heads.n_kv * heads.dim * BYTES  # keys + values

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s)")
    print(f"{machine()}; load average {load()}")
    print(f"batch {args.batch}, {args.steps} decode steps timed per generation, medians of {args.repeats}")
    print(f"{'prompt':>6} {'avg span':>8} {'rlforge ms/step':>15} {'bmm ms/step':>11} {'HF ms/step':>10} {'ratio':>6}")
    spans, ours_steps, bmm = [], [], []
    for prompt_len in args.prompt_lens:
        prompts = torch.randint(3, len(tokenizer), (args.batch, prompt_len))
        prompt_list = prompts.tolist()

        def run_ours(generator: TorchGenerator, tokens: int, prompt_list=prompt_list) -> None:
            generator.generate(prompt_list, SamplingParams(max_new_tokens=tokens, temperature=1.0))

        def run_hf(tokens: int, prompts=prompts) -> None:
            with torch.no_grad():
                hf_generate(model, prompts, tokens, tokenizer.pad_token_id)

        runs = {side: functools.partial(run_ours, generator) for side, generator in generators.items()}
        runs["hf"] = run_hf
        for run in runs.values():  # warm-up (the first length also compiles rlforge's steps)
            run(2)
            run(2 + args.steps)
        times: dict[str, list[float]] = {side: [] for side in runs}
        for _ in range(args.repeats):  # the sides alternate
            for side, run in runs.items():
                times[side].append(per_step_seconds(run, args.steps))
        span = prompt_len + 2 + args.steps / 2
        mine, plain, theirs = (statistics.median(times[side]) for side in ("kernels", "bmm", "hf"))
        spans.append(span)
        ours_steps.append(mine)
        bmm.append(plain)
        row = f"{prompt_len:>6} {span:>8.0f} {mine * 1e3:>15.2f} {plain * 1e3:>11.2f} {theirs * 1e3:>10.2f}"
        print(f"{row} {theirs / mine:>6.2f}", flush=True)

    bmm_fixed, bmm_per_column = fit_line(spans, bmm)
    print(f"with torch.bmm attention: step = {bmm_fixed * 1e3:.2f} ms + {bmm_per_column * 1e6:.2f} us x span")
    fixed, per_column = fit_line(spans, ours_steps)
    gemm = weight_gemm_seconds(model, args.batch)
    rate = streaming_read_rate()
    floor_column = column_bytes / rate
    print(f"rlforge step = {fixed * 1e3:.2f} ms + {per_column * 1e6:.2f} us x span (least squares)")
    print(f"  fixed part: weight GEMMs alone {gemm * 1e3:.2f} ms ({gemm / fixed:.0%} of it)")
    if per_column <= 0:
        print("  per column: below the timing noise at these lengths (try longer --prompt-lens or more --repeats)")
        return
    print(
        f"  per column: {column_bytes / 1e3:.0f} kB of keys and values read, {column_bytes / per_column / 1e9:.1f} "
        f"GB/s; streaming reads here {rate / 1e9:.1f} GB/s, so {floor_column * 1e6:.2f} us "
        f"({per_column / floor_column:.1f}x above that floor)"
    )


if __name__ == "__main__":
    main()
