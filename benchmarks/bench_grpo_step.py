"""One GRPO step end to end: rlforge vs TRL ``GRPOTrainer`` on the same model, prompts and hyper-parameters.

A step is rollout (G samples per prompt) + reward + loss + backward + optimizer step (+ weight sync for
rlforge, whose sampler holds its own copy of the weights). Both trainers live in this process and take
turns step by step (A/B/A/B): TRL's ``train()`` drives, and a ``TrainerCallback`` runs one rlforge step
after each TRL step, so both sides see the same machine load. Medians exclude the warm-up steps::

    python benchmarks/bench_grpo_step.py --threads 1 2 --steps 8 --warmup 2 [--compile] [--precision bf16-mixed]

Identical on both sides: the bundled default policy (0.86M Qwen3, fp32), the built-in ``addition`` prompts,
8 prompts x 8 samples, 32 new tokens at temperature 1 (no top-k/top-p), ``MathReward``, the ``grpo`` loss
(per-sequence token mean, clip 0.2), beta 0 (no reference model), AdamW lr 1e-4 constant, weight decay 0,
grad clip 1.0, one optimizer step per generation batch. ``--precision bf16-mixed`` runs both sides under bf16
autocast with fp32 weights: rlforge's ``GRPOModule(precision="bf16-mixed")`` (its logprob forwards; the sampler stays
fp32) and TRL's ``bf16=True`` (its forwards, generation included). TRL is configured for CPU as fairly as we know:
``use_cpu=True``, ``bf16=False`` (its bf16 default is several times slower on CPU), no gradient
checkpointing, ``steps_per_generation=1``, no logging inside the timed region.

The script also runs ``rlforge fit`` (the embedded default config, fewer steps) in a child process and
prints its peak RSS (``--rss-steps 0`` skips it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
from peak_rss import peak_rss_mb

from rlforge import GRPOModule, RLTrainer
from rlforge.data import RLDataModule
from rlforge.data.tasks import make_task
from rlforge.generation import SamplingParams
from rlforge.losses import GRPOLoss
from rlforge.models import DEFAULT_POLICY, load_policy
from rlforge.rewards import MathReward
from rlforge.strategies import LocalStrategy

PROMPTS, GROUP, NEW_TOKENS, LR = 8, 8, 32, 1e-4


def build_rlforge(
    policy: str,
    seed: int,
    *,
    prompts: int = PROMPTS,
    group: int = GROUP,
    new_tokens: int = NEW_TOKENS,
    task: str = "addition",
    lr: float = LR,
    loss: GRPOLoss | None = None,
    root: str = "rlforge_runs",
    temperature: float = 1.0,
    warmup_steps: int = 0,
    compile: bool = False,
    precision: str = "32-true",
    skip_zero_advantage: bool = False,
) -> RLTrainer:
    """An ``RLTrainer`` prepared for stepping by hand (no logger, checkpoints, progress bar or validation).

    ``loss`` defaults to ``GRPOLoss(beta=0, clip 0.2)``; ``bench_learning.py`` and ``sweep_defaults.py`` pass
    their own task, lr, loss, rollout temperature and warm-up. ``compile`` compiles both the training forward
    (``GRPOModule(compile=True)``) and the sampler's decode step (``generator_options: {compile: true}``).
    """
    module = GRPOModule(
        model=policy,
        loss=loss if loss is not None else GRPOLoss(beta=0.0, clip_low=0.2, clip_high=0.2),
        group_size=group,
        sampling=SamplingParams(max_new_tokens=new_tokens, temperature=temperature),
        lr=lr,
        warmup_steps=warmup_steps,
        reward_fns=[MathReward()],
        compile=compile,
        precision=precision,
        skip_zero_advantage=skip_zero_advantage,
    )
    trainer = RLTrainer(
        strategy=LocalStrategy(generator_options={"compile": True} if compile else None),
        max_steps=10**9,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        val_check_interval=None,
        val_at_start=False,
        grad_clip=1.0,
        seed=seed,
        default_root_dir=root,
    )
    trainer.prepare(module, RLDataModule(task=task, batch_size=prompts, seed=seed))
    return trainer


def build_trl(policy: str, steps: int, seed: int, output_dir: str, on_step_end, task: str = "addition", **overrides):
    """A TRL ``GRPOTrainer`` with the same settings; ``on_step_end(trl_seconds)`` runs after each step.

    ``overrides`` replace ``GRPOConfig`` fields (``bench_learning.py`` sets its own lr, batch, loss, ...).
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = make_task(task, seed=seed).train
    dataset = Dataset.from_list([{"prompt": r["prompt"], "target": str(r["target"])} for r in rows])
    reward = MathReward()

    def math_reward(prompts, completions, target, **kwargs):
        return [reward(p, c, t) for p, c, t in zip(prompts, completions, target, strict=True)]

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            on_step_end(time.perf_counter() - self.start)

    settings = dict(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        loss_type="grpo",
        beta=0.0,
        epsilon=0.2,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=1.0,
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_steps=steps,
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
    )
    config = GRPOConfig(**{**settings, **overrides})
    model, tokenizer = load_policy(policy)
    return GRPOTrainer(
        model=model,
        reward_funcs=math_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Interleave()],
    )


def time_pair(
    policy: str,
    threads: int,
    steps: int,
    warmup: int,
    seed: int,
    compiled: bool,
    precision: str = "32-true",
    skip_zero_advantage: bool = False,
) -> dict[str, float]:
    """Median seconds per step (after ``warmup``) of rlforge (and rlforge compiled) and TRL, stepped alternately;
    with ``skip_zero_advantage`` also ``skipped``, rlforge's median share of rows it left out of the update.

    The compiled side's warm-up steps absorb its compiles (~45 s training forward + ~30 s decode on 2 cores).
    """
    torch.set_num_threads(threads)
    options = {"precision": precision, "skip_zero_advantage": skip_zero_advantage}
    ours = {"rlforge": build_rlforge(policy, seed, **options)}
    if compiled:
        ours["compiled"] = build_rlforge(policy, seed, compile=True, **options)
    times: dict[str, list[float]] = {side: [] for side in (*ours, "trl")}
    skipped: list[float] = []

    def after_trl_step(trl_s: float) -> None:
        times["trl"].append(trl_s)
        for side, trainer in ours.items():
            start = time.perf_counter()
            trainer.run_step()  # one full RL step, exactly what fit() runs per iteration
            times[side].append(time.perf_counter() - start)
        skipped.append(ours["rlforge"].callback_metrics.get("train/skipped_rows_frac", 0.0))

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_trl(policy, warmup + steps, seed, out, after_trl_step, bf16=precision == "bf16-mixed").train()
    medians = {side: statistics.median(seconds[warmup:]) for side, seconds in times.items()}
    return medians | ({"skipped": statistics.median(skipped[warmup:])} if skip_zero_advantage else {})


def random_policy(folder: str, seed: int) -> str:
    """Saves a randomly initialised copy of the default policy's architecture (rarely samples EOS, so
    responses run to ``max_new_tokens``, like long reasoning rollouts) and returns its folder."""
    from rlforge.models.tiny import build_tiny_model

    _, tokenizer = load_policy(DEFAULT_POLICY)
    build_tiny_model(tokenizer, seed=seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def fit_peak_rss_mb(steps: int) -> float:
    """Peak RSS (MiB) of ``rlforge fit`` with the embedded default config and ``steps`` steps, in a child.

    The default config validates before the first step and at step 50 (200 greedy prompts), so the peak
    includes validation. The child starts from a small launcher (``peak_rss.py``): spawned from this process,
    it would report at least this process's own peak (Linux keeps the high-water mark across ``exec``), ~1 GB
    after the compiled side ran.
    """
    with tempfile.TemporaryDirectory() as cwd:
        cmd = [sys.executable, "-m", "rlforge.cli", "fit", f"--trainer.max_steps={steps}"]
        # One intra-op thread: RSS does not depend on it, and 2 OpenMP threads on a busy 2-core box crawl.
        path = os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
        return peak_rss_mb(cmd, cwd=cwd, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["random", "default"],
        help="`default`: the bundled trained policy (answers in ~6 tokens); `random`: a random init of it",
    )
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per side and thread count")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile", action="store_true", help="also time rlforge with its training forward and decode compiled"
    )
    parser.add_argument(
        "--precision", choices=["32-true", "bf16-mixed"], default="32-true", help="both sides' compute precision"
    )
    parser.add_argument(
        "--skip-zero-advantage",
        action="store_true",
        help="rlforge leaves zero-advantage rows out of the update (`GRPOModule(skip_zero_advantage=True)`; same "
        "gradient); a `skipped` column gives the share left out. Off for the issue's headline ratio",
    )
    parser.add_argument("--rss-steps", type=int, default=50, help="steps of the `rlforge fit` RSS run (0 skips)")
    args = parser.parse_args()

    import transformers
    import trl
    from scaling_report import load, machine

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")
    print(f"{machine()}; load average {load()}")
    skip = ", skip_zero_advantage" if args.skip_zero_advantage else ""
    print(f"{PROMPTS} prompts x {GROUP} samples, {NEW_TOKENS} new tokens, beta 0, precision {args.precision}", end="")
    print(f"{skip}; medians of {args.steps} steps")
    extra = f" {'compiled s/step':>15}" if args.compile else ""
    print(f"{'policy':>8} {'threads':>7} {'rlforge s/step':>15}{extra} {'TRL s/step':>11} {'ratio':>6}", end="")
    print(f" {'ratio compiled':>14}" if args.compile else "", end="")
    print(f" {'skipped':>7}" if args.skip_zero_advantage else "")
    ratios: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        paths = {"default": DEFAULT_POLICY, "random": random_policy(folder, args.seed)}
        for policy in args.policies:
            for threads in args.threads:
                t = time_pair(
                    paths[policy], threads, args.steps, args.warmup, args.seed, args.compile, args.precision,
                    args.skip_zero_advantage,
                )  # fmt: skip
                ratios[policy, threads] = {side: t["trl"] / t[side] for side in ("rlforge", "compiled") if side in t}
                row = f"{policy:>8} {threads:>7} {t['rlforge']:>15.3f}"
                row += f" {t['compiled']:>15.3f}" if args.compile else ""
                row += f" {t['trl']:>11.3f} {t['trl'] / t['rlforge']:>6.2f}"
                row += f" {t['trl'] / t['compiled']:>14.2f}" if args.compile else ""
                row += f" {t['skipped']:>7.2f}" if args.skip_zero_advantage else ""
                print(row, flush=True)
    if args.rss_steps:
        print(
            f"peak RSS of `rlforge fit --trainer.max_steps={args.rss_steps}`: {fit_peak_rss_mb(args.rss_steps):.0f} MiB"
        )
    print(summary(ratios, args.skip_zero_advantage))


def summary(ratios: dict[tuple[str, int], dict[str, float]], skip_zero_advantage: bool = False) -> str:
    """The last line: the headline ratio (random policy at 1 thread, the issue's target) or the first row run.

    With ``skip_zero_advantage`` the line says so: rlforge then does less work than TRL on zero-variance groups
    (all of the random policy's), which is not the headline comparison.
    """
    policy, threads = ("random", 1) if ("random", 1) in ratios else next(iter(ratios))
    sides = ratios[policy, threads]
    line = f"median TRL/rlforge s/step ratio, {policy} policy, {threads} thread(s): {sides['rlforge']:.2f}x"
    line += f" (compiled {sides['compiled']:.2f}x)" if "compiled" in sides else ""
    return line + (" with skip_zero_advantage" if skip_zero_advantage else "")


if __name__ == "__main__":
    main()
