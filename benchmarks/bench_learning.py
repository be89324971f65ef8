"""The learning race: rlforge vs TRL ``GRPOTrainer`` from one warm start, greedy held-out accuracy vs steps and time.

For each task both trainers start from the same checkpoint with identical hyper-parameters (lr, group size,
prompts per step, clip, beta, max new tokens, seed, ``MathReward``) and train for the same wall-clock budget
of *training* seconds each. They run in this process and take turns chunk by chunk (``--eval-every`` steps
of TRL, then as many of rlforge, ...) so both see the same machine load; after every chunk one evaluator
function (``greedy_accuracy``: HF ``generate`` with greedy decoding on the same held-out rows) scores
whichever policy just trained. Evaluation time is not counted in either budget::

    python benchmarks/bench_learning.py                 # addition + max, ~15-20 min on 2 cores
    python benchmarks/bench_learning.py --quick         # smoke run, < 2 min
    python benchmarks/bench_learning.py --skip-zero-advantage   # rlforge skips zero-advantage rows (same gradient)
    python benchmarks/bench_learning.py --tasks reverse --seeds 0 1 2 3 --steps 30   # per step, mean over seeds

Warm starts: ``addition`` uses the shipped default policy (already trained on it); the other tasks get a short
``SFTModule`` run from the default policy, cached under ``--cache-dir`` so both sides (and later runs) load the
very same folder. The one-step machinery (``build_trl``'s settings, ``RLTrainer.prepare`` + ``run_step``)
is ``bench_grpo_step.py``'s; this script only adds the chunked turn-taking and the evaluator.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_grpo_step, run as a script or imported

from bench_grpo_step import build_rlforge, build_trl  # noqa: E402

from rlforge import RLTrainer  # noqa: E402
from rlforge.data.tasks import make_task  # noqa: E402
from rlforge.losses import GRPOLoss  # noqa: E402
from rlforge.models import DEFAULT_POLICY  # noqa: E402
from rlforge.rewards import MathReward  # noqa: E402

# Warm-start SFT steps (batch 32, lr 1e-4) that leave room to learn: greedy held-out ~0.5 on max, ~0.15-0.2 on reverse.
SFT_STEPS = {"max": 40, "reverse": 150}

# Run folders (run.json) of the trainers built here: kept out of the user's working directory.
RUNS_DIR = tempfile.TemporaryDirectory(prefix="bench_learning-")

# TRL loss_type -> rlforge GRPOLoss aggregation with the same normaliser (one process, no accumulation).
AGGREGATIONS = {"grpo": "seq-mean-token-mean", "dapo": "token-mean"}


@dataclasses.dataclass
class Race:
    """Hyper-parameters both sides share."""

    task: str
    policy: str
    prompts: int = 16
    group: int = 8
    new_tokens: int = 8
    lr: float = 1e-4
    clip: float = 0.2
    beta: float = 0.0
    loss: str = "grpo"
    seed: int = 0
    skip_zero_advantage: bool = False  # rlforge only: same gradient, less work (TRL has no such option)


def greedy_accuracy(model: torch.nn.Module, tokenizer, rows: list[dict[str, str]], new_tokens: int) -> float:
    """Fraction of ``rows`` whose greedy answer ``MathReward`` scores 1; the one evaluator of both sides.

    Every prompt of a built-in task has the same token length, so a batch needs no padding.
    """
    reward, correct = MathReward(), 0
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            ids = torch.tensor([tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in chunk])
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )
            texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
            correct += sum(reward(r["prompt"], t, str(r["target"])) >= 1.0 for r, t in zip(chunk, texts, strict=True))
    finally:
        model.train(was_training)
    return correct / len(rows)


def warm_start(task: str, cache_dir: Path, steps: int, seed: int) -> str:
    """The shipped policy for ``addition``; otherwise a short SFT of it on ``task``, saved once under ``cache_dir``."""
    if task == "addition":
        return DEFAULT_POLICY
    folder = cache_dir / f"sft-{task}-{steps}steps-seed{seed}"
    if (folder / "config.json").is_file():
        return str(folder)
    from rlforge import SFTModule
    from rlforge.data.sft import SFTDataModule

    module = SFTModule(max_new_tokens=8)
    trainer = RLTrainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        val_check_interval=None,
        val_at_start=False,
        seed=seed,
        default_root_dir=RUNS_DIR.name,
    )
    trainer.fit(module, SFTDataModule(task=task, batch_size=32, seed=seed))
    tmp = folder.with_name(folder.name + ".tmp")
    module.policy.save_pretrained(tmp)
    module.tokenizer.save_pretrained(tmp)
    tmp.rename(folder)  # atomic: a killed run never leaves a half-written warm start behind
    return str(folder)


def build_ours(race: Race) -> RLTrainer:
    """``bench_grpo_step.build_rlforge`` with this race's task and hyper-parameters."""
    loss = GRPOLoss(beta=race.beta, clip_low=race.clip, clip_high=race.clip, aggregation=AGGREGATIONS[race.loss])
    return build_rlforge(
        race.policy, race.seed, prompts=race.prompts, group=race.group, new_tokens=race.new_tokens, task=race.task,
        lr=race.lr, loss=loss, root=RUNS_DIR.name, skip_zero_advantage=race.skip_zero_advantage,
    )  # fmt: skip


def build_theirs(race: Race, output_dir: str, on_step_end):
    """TRL's ``GRPOTrainer`` from ``bench_grpo_step.build_trl``, with this race's task and hyper-parameters."""
    return build_trl(
        race.policy, 10**6, race.seed, output_dir, on_step_end, task=race.task,
        loss_type=race.loss, beta=race.beta, epsilon=race.clip, epsilon_high=race.clip, learning_rate=race.lr,
        per_device_train_batch_size=race.prompts * race.group, num_generations=race.group,
        max_completion_length=race.new_tokens,
    )  # fmt: skip


def run_race(
    race: Race, budget_s: float, eval_every: int, val_rows: list[dict[str, str]], max_steps: float = float("inf")
) -> dict[str, list]:
    """Alternate chunks of ``eval_every`` steps until each side has trained ``budget_s`` seconds (or ``max_steps``).

    Returns ``{side: [(step, train_seconds, accuracy), ...]}``, starting with step 0.
    """
    ours = build_ours(race)
    module = ours.module
    start_acc = greedy_accuracy(module.policy, module.tokenizer, val_rows, race.new_tokens)
    curves = {"rlforge": [(0, 0.0, start_acc)], "trl": [(0, 0.0, start_acc)]}
    clock = {"rlforge": 0.0, "trl": 0.0}
    holder: dict[str, object] = {}

    def done(side: str, step: int) -> bool:
        return clock[side] >= budget_s or step >= max_steps

    def rlforge_chunk() -> None:
        first = ours.global_step
        for _ in range(eval_every):
            if done("rlforge", ours.global_step):
                break
            begin = time.perf_counter()
            ours.run_step()  # one full RL step, exactly what fit() runs per iteration
            clock["rlforge"] += time.perf_counter() - begin
        if ours.global_step == first:
            return
        acc = greedy_accuracy(module.policy, module.tokenizer, val_rows, race.new_tokens)
        curves["rlforge"].append((ours.global_step, clock["rlforge"], acc))

    def after_trl_step(trl_s: float) -> None:
        clock["trl"] += trl_s
        trainer = holder["trl"]
        step = trainer.state.global_step
        if step % eval_every == 0 or done("trl", step):
            acc = greedy_accuracy(trainer.model, trainer.processing_class, val_rows, race.new_tokens)
            curves["trl"].append((step, clock["trl"], acc))
            rlforge_chunk()
        if done("trl", step):
            trainer.control.should_training_stop = True

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trl_trainer = build_theirs(race, out, after_trl_step)
        holder["trl"] = trl_trainer
        trl_trainer.train()
    while not done("rlforge", ours.global_step):  # TRL's budget ran out first: rlforge finishes its own alone
        rlforge_chunk()
    return curves


def time_to_reach(curve: list[tuple[int, float, float]], target: float) -> float | None:
    """Training seconds at the first evaluation with accuracy >= ``target`` (``None``: never)."""
    return next((s for _, s, acc in curve if acc >= target), None)


def report(task: str, curves: dict[str, list]) -> list[str]:
    """A markdown table, one row per evaluated step (``-`` where a side did not evaluate), and the summary."""
    points = {side: {step: (sec, acc) for step, sec, acc in curve} for side, curve in curves.items()}
    lines = [
        f"### {task}",
        "",
        "| step | rlforge acc | rlforge train s | TRL acc | TRL train s |",
        "|---|---|---|---|---|",
    ]
    for step in sorted(set(points["rlforge"]) | set(points["trl"])):
        cells = []
        for side in ("rlforge", "trl"):
            sec, acc = points[side].get(step, (None, None))
            cells += ["-", "-"] if acc is None else [f"{acc:.3f}", f"{sec:.1f}"]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    trl_final = curves["trl"][-1][2]
    ours_reach = time_to_reach(curves["rlforge"], trl_final)
    at = max(set(points["rlforge"]) & set(points["trl"]))
    lines += [
        "",
        f"steps in budget: rlforge {curves['rlforge'][-1][0]}, TRL {curves['trl'][-1][0]}; at step {at}: "
        f"rlforge {points['rlforge'][at][1]:.3f}, TRL {points['trl'][at][1]:.3f}. TRL's final accuracy "
        f"{trl_final:.3f} ({curves['trl'][-1][1]:.0f} s): rlforge reached it after "
        + (f"{ours_reach:.1f} s" if ours_reach is not None else "never (within its budget)"),
        "",
    ]
    return lines


def report_seeds(task: str, runs: dict[int, dict[str, list]]) -> list[str]:
    """Per-step accuracy over seeds: each side's mean, and the paired difference with its standard error.

    The difference is taken per seed (rlforge - TRL, same warm start and seed; each side draws its own prompt
    order from it), so that "rlforge learns worse per step" can be told from seed noise.
    """
    steps = sorted(set.intersection(*({s for s, _, _ in c[side]} for c in runs.values() for side in c)))
    lines = [
        f"### {task}: {len(runs)} seeds ({', '.join(map(str, runs))})",
        "",
        "| step | rlforge mean acc | TRL mean acc | rlforge - TRL | std. error | seeds rlforge >= TRL |",
        "|---|---|---|---|---|---|",
    ]
    for step in steps:
        acc = {side: [dict((s, a) for s, _, a in c[side])[step] for c in runs.values()] for side in ("rlforge", "trl")}
        diffs = [o - t for o, t in zip(acc["rlforge"], acc["trl"], strict=True)]
        stderr = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
        lines.append(
            f"| {step} | {statistics.mean(acc['rlforge']):.3f} | {statistics.mean(acc['trl']):.3f} | "
            f"{statistics.mean(diffs):+.3f} | {stderr:.3f} | {sum(d >= 0 for d in diffs)}/{len(diffs)} |"
        )
    for seed, curves in runs.items():
        cells = "; ".join(f"{side} " + " ".join(f"{a:.3f}" for _, _, a in curves[side]) for side in ("rlforge", "trl"))
        lines += ["", f"seed {seed}: {cells}"]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["addition", "max"])
    parser.add_argument("--budget-s", type=float, default=150.0, help="training seconds per side and task")
    parser.add_argument("--eval-every", type=int, default=10, help="steps per chunk (one evaluation each)")
    parser.add_argument("--val-rows", type=int, default=200, help="held-out rows of the evaluator")
    parser.add_argument("--sft-steps", type=int, default=None, help=f"warm-start SFT steps (default {SFT_STEPS})")
    parser.add_argument("--loss", choices=sorted(AGGREGATIONS), default="grpo", help="TRL loss_type (same rlforge one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="the warm start's seed, and the race's")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="per-step mode: one race per seed (same warm start), each side --steps steps with no time budget; "
        "prints each side's mean accuracy per step and the paired difference over seeds",
    )
    parser.add_argument("--steps", type=int, default=30, help="steps per side and seed in per-step mode")
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/rlforge/bench_learning"))
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 s per side, 5-step chunks, 64 rows")
    parser.add_argument(
        "--skip-zero-advantage",
        action="store_true",
        help="rlforge leaves zero-advantage rows out of its update (`GRPOModule(skip_zero_advantage=True)`: the same "
        "gradient, so the same accuracy per step, in fewer seconds)",
    )
    args = parser.parse_args()
    if args.quick:
        args.budget_s, args.eval_every, args.val_rows = 10.0, 5, 64
    torch.set_num_threads(args.threads)

    import transformers
    import trl

    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
        f"{args.threads} thread(s), budget {args.budget_s:.0f} training s per side, loss {args.loss}"
        + (", rlforge with skip_zero_advantage" if args.skip_zero_advantage else ""),
        flush=True,
    )
    out: list[str] = []
    for task in args.tasks:
        policy = warm_start(task, Path(args.cache_dir), args.sft_steps or SFT_STEPS.get(task, 100), args.seed)
        val_rows = make_task(task, seed=args.seed).val[: args.val_rows]
        if args.seeds:
            runs = {}
            for seed in args.seeds:
                race = Race(task, policy, loss=args.loss, seed=seed, skip_zero_advantage=args.skip_zero_advantage)
                runs[seed] = run_race(race, float("inf"), args.eval_every, val_rows, max_steps=args.steps)
                print(f"seed {seed} done; load {os.getloadavg()}", flush=True)
            lines = report_seeds(task, runs)
        else:
            race = Race(task, policy, loss=args.loss, seed=args.seed, skip_zero_advantage=args.skip_zero_advantage)
            curves = run_race(race, args.budget_s, args.eval_every, val_rows)
            lines = report(task, curves)
        print("\n".join(lines), flush=True)
        out += lines
    print(f"load at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
