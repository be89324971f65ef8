"""TorchGenerator vs HF ``model.generate``: tokens/s on the same tiny model, prompts and sampling params.

Both sides run in this process, interleaved A/B/A/B, and the script prints medians and the ratio::

    python benchmarks/bench_generate.py --batch-sizes 8 64 --prompt-len 64 --new-tokens 128 --repeats 3

Generation runs to ``max_new_tokens`` on both sides (EOS is disabled) so both produce the same token count.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlforge.generation import SamplingParams, TorchGenerator
from rlforge.models.tiny import build_tiny_model, train_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = train_tokenizer(["Q: What is 3 + 5?\nA: #### 8", "0123456789 abcdefghijklmnopqrstuvwxyz"] * 8, 320)
    model = build_tiny_model(tokenizer, seed=0, max_position_embeddings=args.prompt_len + args.new_tokens + 8).eval()
    model.generation_config.eos_token_id = None  # both sides generate exactly new_tokens tokens
    generator = TorchGenerator(model, tokenizer, seed=0)
    generator.eos_token_ids = [-1]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)

    print(f"threads={args.threads} prompt_len={args.prompt_len} new_tokens={args.new_tokens}")
    print(f"{'batch':>6} {'rlforge tok/s':>14} {'HF tok/s':>10} {'ratio':>6}")
    for batch in args.batch_sizes:
        prompts = torch.randint(3, len(tokenizer), (batch, args.prompt_len))
        times: dict[str, list[float]] = {"rlforge": [], "hf": []}
        for _ in range(args.repeats + 1):  # the first round warms up both sides
            for side in ("rlforge", "hf"):
                start = time.perf_counter()
                with torch.no_grad():
                    if side == "rlforge":
                        generator.generate(prompts.tolist(), params)
                    else:
                        model.generate(
                            prompts,
                            attention_mask=torch.ones_like(prompts),
                            do_sample=True,
                            temperature=1.0,
                            top_k=0,
                            top_p=1.0,
                            max_new_tokens=args.new_tokens,
                            min_new_tokens=args.new_tokens,
                            pad_token_id=tokenizer.pad_token_id,
                        )
                times[side].append(time.perf_counter() - start)
        tokens = batch * args.new_tokens
        ours, theirs = (tokens / statistics.median(times[s][1:]) for s in ("rlforge", "hf"))
        print(f"{batch:>6} {ours:>14.0f} {theirs:>10.0f} {ours / theirs:>6.2f}")


if __name__ == "__main__":
    main()
