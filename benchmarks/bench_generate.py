"""TorchGenerator vs HF ``model.generate``: tokens/s on the same tiny model, prompts and sampling params.

All sides run in this process, interleaved A/B/A/B, and the script prints medians and the ratio::

    python benchmarks/bench_generate.py --batch-sizes 8 64 --prompt-len 64 --new-tokens 128 --repeats 3 --threads 1 2

Generation runs to ``max_new_tokens`` on every side (EOS is disabled) so all produce the same token count.
Sampling is plain temperature 1 (no top-k/top-p) everywhere. ``rlforge`` is TorchGenerator with its defaults
(``compile="auto"``, which stays eager in a run this short); ``compiled`` is ``compile=True`` (the warm-up round
absorbs the compile). ``rlforge (HF fwd)`` is TorchGenerator with ``static_cache=False``:
the same loop over the model's HF forward and a ``DynamicCache``, which shows how much of the gain is the
``KVDecoder``. The last line's ``ratio`` columns are rlforge / HF generate (eager default, compiled).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scaling_report, run as a script or imported
from scaling_report import load, machine  # noqa: E402

from rlforge.generation import SamplingParams, TorchGenerator  # noqa: E402
from rlforge.models.tiny import build_tiny_model, train_tokenizer  # noqa: E402

SIDES = ("rlforge", "rlforge_compiled", "rlforge_hf_forward", "hf_generate")
GENERATOR_OPTIONS = {
    "rlforge": {},  # the defaults: compile="auto" stays eager in a run this short
    "rlforge_compiled": {"compile": True},
    "rlforge_hf_forward": {"static_cache": False},
}


def tiny_model(max_len: int):
    """The benchmarks' tiny fp32 Qwen3 (``TINY_CONFIG``, a 320-token tokenizer) and its tokenizer, in eval mode, with
    EOS removed from its generation config so HF ``generate`` runs every row to ``max_new_tokens`` (give
    ``TorchGenerator`` ``eos_token_ids = [-1]`` for the same)."""
    tokenizer = train_tokenizer(["Q: What is 3 + 5?\nA: #### 8", "0123456789 abcdefghijklmnopqrstuvwxyz"] * 8, 320)
    model = build_tiny_model(tokenizer, seed=0, max_position_embeddings=max_len).eval()
    model.generation_config.eos_token_id = None
    return model, tokenizer


def hf_generate(model, prompts: torch.Tensor, new_tokens: int, pad_token_id: int) -> None:
    """HF ``generate`` of exactly ``new_tokens`` tokens for each row of ``prompts``: plain temperature-1 sampling."""
    model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=pad_token_id,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    model, tokenizer = tiny_model(args.prompt_len + args.new_tokens + 8)
    generators = {
        side: TorchGenerator(model, tokenizer, seed=0, **GENERATOR_OPTIONS[side]) for side in GENERATOR_OPTIONS
    }
    for generator in generators.values():
        generator.eos_token_ids = [-1]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"{machine()}; load average {load()}")
    print(f"prompt_len={args.prompt_len} new_tokens={args.new_tokens}, medians of {args.repeats} runs after a warm-up")
    print(
        f"{'threads':>7} {'batch':>6} {'rlforge tok/s':>14} {'compiled':>9} {'rlforge (HF fwd)':>17} "
        f"{'HF generate':>12} {'ratio':>6} {'ratio compiled':>15}"
    )
    for threads, batch in itertools.product(args.threads, args.batch_sizes):
        torch.set_num_threads(threads)
        prompts = torch.randint(3, len(tokenizer), (batch, args.prompt_len))
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        for _ in range(args.repeats + 1):  # the first round warms up every side
            for side in SIDES:
                start = time.perf_counter()
                with torch.no_grad():
                    if side in generators:
                        generators[side].generate(prompts.tolist(), params)
                    else:
                        hf_generate(model, prompts, args.new_tokens, tokenizer.pad_token_id)
                times[side].append(time.perf_counter() - start)
        ours, compiled, ours_hf, theirs = (batch * args.new_tokens / statistics.median(times[s][1:]) for s in SIDES)
        print(
            f"{threads:>7} {batch:>6} {ours:>14.0f} {compiled:>9.0f} {ours_hf:>17.0f} {theirs:>12.0f} "
            f"{ours / theirs:>6.2f} {compiled / theirs:>15.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
