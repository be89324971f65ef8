"""Build the warm-started agentic policies shipped in ``rlforge/models/assets/agent_*_policy``.

Reproducible on CPU (fixed seeds and thread count), like ``scripts/make_default_policy.py`` whose helpers it
reuses: for each task, write expert trajectories (model turns and the environment's observations, exactly as
the episode loop tokenises them: prompt, then each model turn + EOS, each observation tokenised on its own),
train a BPE tokenizer on everything both sides say, build the tiny Qwen3, run a short supervised warm start
with the prompt and observation tokens masked from the loss (they are the environment's), measure held-out
success with the real episode loop (``rlforge.envs.run_episodes``: greedy, and sampled at temperature 1) and
save an HF folder plus ``warmstart.json``.

The demonstrations are deliberately mixed so that RL has room to improve (greedy held-out success ~10-40%,
sampled success well above 0):

- ``tool`` (task ``tool_multiply``, ``ToolEnvironment`` with the calculator): the expert calls the calculator
  and copies its result (``#### <product>``) with probability ``--tool-p-high`` when the first digit of the
  first operand is 1-3 and ``--tool-p-low`` otherwise; else it answers a wrong guess without the tool. RL
  learns to call the tool for every question.
- ``multiturn`` (task ``guess_number``, ``GuessNumberEnvironment``): with probability ``--guess-bisect`` the
  expert bisects (uses every higher/lower hint); otherwise it guesses 1, 2, 3, ... ignoring the hints. RL
  learns to use the observations. Bisection can only reach a held-out number that lies on the path to some
  training number (it is never the answer of a training episode), so greedy held-out success tops out near 0.6.

The defaults give (1 thread): ``tool`` 400 steps -> greedy held-out success 0.355, sampled (T=1) 0.284 on the
200 held-out questions; ``multiturn`` 300 steps -> greedy 0.15, sampled 0.388 on the 20 held-out numbers.
``configs/agent_tool.yaml`` then reaches 1.0 in 30 RL steps and ``configs/agent_multiturn.yaml`` 0.45-0.6 in
40 (about 1.5 minutes each on 2 CPU cores). The output is bit-identical across runs with the same flags and
thread count.

Usage::

    python scripts/make_agent_policies.py                    # both shipped checkpoints
    python scripts/make_agent_policies.py --only tool --steps 300 --eval-every 100 --no-save
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.append(str(Path(__file__).resolve().parent))  # the default-policy script's helpers

from make_default_policy import lr_factor, parse_overrides  # noqa: E402

from rlforge.data.tasks import TaskSplits, make_task  # noqa: E402
from rlforge.envs import Environment, LocalEnvRunner, Observation, run_episodes  # noqa: E402
from rlforge.envs.guess import HIGHER, INVALID, LOWER, GuessNumberEnvironment  # noqa: E402
from rlforge.generation.params import SamplingParams  # noqa: E402
from rlforge.generation.torch_generator import TorchGenerator  # noqa: E402
from rlforge.models.tiny import build_tiny_model, train_tokenizer  # noqa: E402

ASSETS = Path(__file__).resolve().parents[1] / "rlforge" / "models" / "assets"

# A trajectory is the prompt and then alternating (text, is_model_turn) segments.
Trajectory = tuple[str, list[tuple[str, bool]]]

TOOL = {"task": "tool_multiply", "max_turns": 3, "max_new_tokens": 40, "output": "agent_tool_policy"}
MULTITURN = {
    "task": "guess_number",
    "high": 50,
    "max_turns": 6,
    "max_new_tokens": 6,
    "output": "agent_multiturn_policy",
}


def tool_call(expression: str) -> str:
    """A model turn calling the calculator, in the pinned Hermes/Qwen format."""
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "</tool_call>"


def tool_trajectory(row: dict[str, str], rng: random.Random, p_high: float, p_low: float) -> Trajectory:
    """Calls the calculator and copies its answer, or (sometimes, depending on the question) guesses without it."""
    a, b = row["prompt"].removeprefix("Q: What is ").removesuffix("?\nA:").split(" * ")
    p_tool = p_high if a[0] in "123" else p_low
    if rng.random() < p_tool:
        product = str(int(a) * int(b))
        return row["prompt"], [
            (tool_call(f"{a} * {b}"), True),
            (f"<tool_response>{product}</tool_response>", False),
            (f" #### {product}", True),
        ]
    wrong = rng.randrange(1000, 100000)
    while str(wrong) == row["target"]:
        wrong = rng.randrange(1000, 100000)
    return row["prompt"], [(f" #### {wrong}", True)]


def guess_trajectory(row: dict[str, str], rng: random.Random, p_bisect: float, high: int, max_turns: int) -> Trajectory:
    """Bisection on the higher/lower hints, or a scan 1, 2, 3, ... that ignores them (ends at ``max_turns``)."""
    target, lo, hi = int(row["target"]), 1, high
    bisect = rng.random() < p_bisect
    segments: list[tuple[str, bool]] = []
    for turn in range(max_turns):
        guess = (lo + hi) // 2 if bisect else turn + 1
        segments.append((f" {guess}", True))
        if guess == target or turn == max_turns - 1:
            break
        segments.append((HIGHER if target > guess else LOWER, False))
        lo, hi = (guess + 1, hi) if target > guess else (lo, guess - 1)
    return row["prompt"], segments


def sft_batch(tokenizer: Any, trajectories: Sequence[Trajectory]) -> dict[str, torch.Tensor]:
    """Right-padded ids/mask/labels: model turns + EOS are learned; prompt, observations and padding are not."""
    eos = tokenizer.eos_token_id
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    seqs, labels = [], []
    for prompt, segments in trajectories:
        ids = encode(prompt)
        ys = [-100] * len(ids)
        for text, is_model in segments:
            piece = encode(text) + ([eos] if is_model else [])
            ids += piece
            ys += piece if is_model else [-100] * len(piece)
        seqs.append(ids)
        labels.append(ys)
    width, pad = max(map(len, seqs)), tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in seqs]),
        "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
        "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels]),
    }


class PlainEncoder:
    """The episode loop's text <-> tokens for a plain (no chat template) policy, as ``GRPOModule`` encodes."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def prompt(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def observation(self, obs: Observation) -> list[int]:
        return self.prompt(obs.text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def episode_success(
    model: torch.nn.Module,
    tokenizer: Any,
    env: Environment,
    rows: Sequence[dict[str, str]],
    max_new_tokens: int,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int = 0,
) -> dict[str, float]:
    """Success rate, mean turns and tool calls of ``samples`` real episodes per row (``run_episodes``)."""
    generator = TorchGenerator(model, tokenizer, seed=seed, compile=False)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
    groups = run_episodes(
        rows, samples, generator, LocalEnvRunner(env), PlainEncoder(tokenizer), params, seeds=[seed] * len(rows)
    )
    episodes = [ep for group in groups for ep in group]
    mean = lambda xs: sum(xs) / len(xs)
    return {
        "success": mean([float(ep.success) for ep in episodes]),
        "turns": mean([ep.turns for ep in episodes]),
        "tool_calls": mean([ep.tool_calls for ep in episodes]),
    }


def evaluate(model, tokenizer, env, splits: TaskSplits, max_new_tokens: int, samples: int = 4) -> dict[str, float]:
    """Greedy and sampled (T=1) episode success on the held-out split and on (at most 100 rows of) train."""
    out: dict[str, float] = {}
    for split, rows in (("val", splits.val), ("train", splits.train[:100])):
        for mode, temperature, n in (("greedy", 0.0, 1), ("sampled_t1", 1.0, samples)):
            stats = episode_success(model, tokenizer, env, rows, max_new_tokens, temperature, n)
            out.update({f"{split}_{mode}_{k}": round(v, 4) for k, v in stats.items()})
    return out


def make_environment(name: str) -> Environment:
    """The environment the shipped config of task ``name`` uses."""
    if name == "multiturn":
        return GuessNumberEnvironment(low=1, high=MULTITURN["high"], max_turns=MULTITURN["max_turns"])
    from rlforge.envs import ToolEnvironment
    from rlforge.envs.tools import calculator

    return ToolEnvironment(tools=[calculator], max_turns=TOOL["max_turns"])


def build(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Warm-starts, measures and (unless ``--no-save``) saves the policy of task ``name`` (tool or multiturn)."""
    spec = TOOL if name == "tool" else MULTITURN
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    if name == "tool":
        splits = make_task(spec["task"], seed=args.seed)
        expert = lambda row: tool_trajectory(row, rng, args.tool_p_high, args.tool_p_low)
    else:
        splits = make_task(spec["task"], seed=args.seed, high=spec["high"])
        expert = lambda row: guess_trajectory(row, rng, args.guess_bisect, spec["high"], spec["max_turns"])
    steps = args.steps if args.steps is not None else (args.tool_steps if name == "tool" else args.guess_steps)
    lr = args.lr if args.lr is not None else (args.tool_lr if name == "tool" else args.guess_lr)
    env = make_environment(name)
    start = time.perf_counter()
    # Both sides of every conversation: prompts, model turns (both strategies), observations.
    texts_rng = random.Random(args.seed + 1)
    corpus_rows = (splits.train + splits.val)[:20000]
    if name == "tool":
        corpus = [tool_trajectory(r, texts_rng, 0.5, 0.5) for r in corpus_rows]
    else:
        corpus = [
            guess_trajectory(r, texts_rng, p, spec["high"], spec["max_turns"]) for r in corpus_rows for p in (0, 1)
        ]
    texts = [prompt + "".join(text for text, _ in segments) for prompt, segments in corpus]
    tokenizer = train_tokenizer(texts + [INVALID], vocab_size=args.vocab_size)
    model = build_tiny_model(tokenizer, seed=args.seed, **parse_overrides(args.model))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched_args = argparse.Namespace(steps=steps, warmup_steps=args.warmup_steps, schedule=args.schedule)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: lr_factor(i, sched_args))
    loss = torch.tensor(float("nan"))
    for step in range(1, steps + 1):
        batch = sft_batch(tokenizer, [expert(rng.choice(splits.train)) for _ in range(args.batch_size)])
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 25 == 0:
            print(f"[{name}] step {step:4d} loss {loss.item():.4f} {time.perf_counter() - start:.0f}s", flush=True)
        if args.eval_every and step % args.eval_every == 0:
            m = evaluate(model, tokenizer, env, splits, spec["max_new_tokens"])
            print(f"[{name}] step {step:4d} loss {loss.item():.3f} {json.dumps(m)}", flush=True)
    train_seconds = time.perf_counter() - start
    model.eval()
    metrics = evaluate(model, tokenizer, env, splits, spec["max_new_tokens"])
    report = {
        "task": spec["task"],
        "task_kwargs": {"high": spec["high"]} if name == "multiturn" else {},
        "environment": type(env).__module__ + "." + type(env).__name__,
        "max_turns": spec["max_turns"],
        "max_new_tokens_per_turn": spec["max_new_tokens"],
        "num_train_prompts": len(splits.train),
        "num_val_prompts": len(splits.val),
        "demonstrations": (
            {"tool_p_high": args.tool_p_high, "tool_p_low": args.tool_p_low}
            if name == "tool"
            else {"guess_bisect": args.guess_bisect}
        ),
        "seed": args.seed,
        "threads": args.threads,
        "train_steps": steps,
        "batch_size": args.batch_size,
        "lr": lr,
        "schedule": args.schedule,
        "warmup_steps": args.warmup_steps,
        "optimizer": "AdamW",
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "model_overrides": parse_overrides(args.model),
        "train_wall_seconds": round(train_seconds, 1),
        "final_loss": round(loss.item(), 4),
        "sampled_eval": {"temperature": 1.0, "samples_per_prompt": 4, "seed": 0},
        **metrics,
    }
    print(json.dumps(report, indent=2), flush=True)
    if not args.no_save:
        out = (args.output_root or ASSETS) / spec["output"]
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / "warmstart.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"saved to {out}", flush=True)
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["tool", "multiturn"], default=None, help="build one policy")
    parser.add_argument("--steps", type=int, default=None, help="override both tasks' step counts")
    parser.add_argument("--tool-steps", type=int, default=400)
    parser.add_argument("--guess-steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=None, help="override both tasks' learning rates")
    parser.add_argument("--tool-lr", type=float, default=1e-3)
    parser.add_argument("--guess-lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--tool-p-high", type=float, default=0.8, help="P(tool) when the first digit is 1-3")
    parser.add_argument("--tool-p-low", type=float, default=0.2, help="P(tool) otherwise")
    parser.add_argument("--guess-bisect", type=float, default=0.45, help="P(bisection) in guess demonstrations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--model", nargs="*", default=[], help="config overrides, e.g. hidden_size=96")
    parser.add_argument("--eval-every", type=int, default=0, help="print episode success every N steps")
    parser.add_argument("--output-root", type=Path, default=None, help="parent folder (default: the assets)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [args.only] if args.only else ["tool", "multiturn"]
    return {name: build(name, args) for name in names}


if __name__ == "__main__":
    main()
