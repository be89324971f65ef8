"""``GRPOModule``: group sampling, reward functions (or an environment), group-normalised advantages, any loss."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from jsonargparse import lazy_instance

from rlforge.advantages import compute_advantages
from rlforge.envs.base import Environment, check_environment
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams
from rlforge.losses import GRPOLoss, PolicyLoss
from rlforge.losses.call import LossModule, call_loss, check_loss
from rlforge.models import DEFAULT_POLICY, compute_logprobs
from rlforge.module import PolicyModule
from rlforge.optim import LRSchedulerCallable, OptimizerCallable
from rlforge.parallel.loss_scale import Normaliser, loss_share
from rlforge.rewards import MathReward, Reward, RewardFn, RewardRunner, check_reward
from rlforge.rollout import RolloutOptions
from rlforge.types import Group, TrainBatch

if TYPE_CHECKING:
    from rlforge.services import Scorer

_DEFAULT_LOSS = lazy_instance(GRPOLoss)


class GRPOModule(PolicyModule):
    """Group-relative policy optimisation with any ``PolicyLoss``.

    Args:
        model: ``rlforge/default-policy`` (bundled, offline), a local HF folder or a hub id.
        loss: The policy loss (``GRPOLoss``, ``DAPOLoss``, ``CISPOLoss``, ... or your own): a ``PolicyLoss``
            or any ``nn.Module`` whose ``forward`` takes ``(logprobs, ref_logprobs, advantages, padding_mask)``
            (see ``rlforge.losses.call`` for the shapes it gets).
        group_size: Completions sampled per prompt (G >= 2 for group-normalised advantages).
        sampling: Rollout sampling parameters (``n`` is set from ``group_size``). The default temperature 0.7
            (not 1.0) keeps a weak SFT warm start's groups from being all-wrong: measured in the README's
            "SFT then GRPO" section, where 1.0 left reverse flat and 0.7 learned.
        val_sampling: Validation sampling parameters (greedy by default).
        reward_fns: Rewards ``(prompt, response, target) -> float``: ``Reward`` classes by ``class_path`` or
            functions by import path; default ``[MathReward()]``.
        reward_weights: One weight per reward function (default all 1).
        reward_timeout_s: Per-call time limit of a reward function.
        max_reward_error_frac: Fraction of failing reward calls in a step that stops the run.
        advantage: ``group`` (GRPO), ``drgrpo`` (mean only), ``rloo`` or ``batch``.
        lr: AdamW learning rate (unused when ``optimizer`` is set: give its ``lr`` there). The default 3e-5 is
            the largest value tried that learned from every SFT warm start in ``benchmarks/sweep_defaults.py``
            (1e-4 learns the shipped task faster but collapses some warm starts within 20 steps).
        weight_decay: AdamW weight decay (unused when ``optimizer`` is set).
        warmup_steps: Linear LR warm-up length in RL steps (0 disables).
        entropy_coef: Weight of an entropy bonus added to the loss (0 disables).
        dtype: Policy parameter dtype (``float32``, ``bfloat16``, ``float16``).
        dynamic_sampling: DAPO dynamic sampling: resample prompts until the batch has ``data.batch_size``
            groups whose rewards differ (at most ``max_sampling_tries`` rollouts per step).
        max_sampling_tries: Rollout calls per step allowed by dynamic sampling.
        overlong_cache_len: DAPO soft overlong punishment over the last N tokens before ``max_new_tokens``
            (0 disables).
        overlong_penalty: Reward subtracted at ``max_new_tokens`` by the overlong punishment.
        filter_truncated: DAPO overlong filtering: truncated responses get no loss.
        chat_template: Encode each prompt as a user turn of the tokenizer's chat template (instruct/chat
            models, e.g. Qwen3); the tokenizer must have one.
        system_prompt: System message put before the user turn (needs ``chat_template: true``).
        backend: Policy implementation: ``hf`` (transformers, default) or ``titan`` (torchtitan Qwen3 built
            from its registry, HF checkpoint in/out through its state-dict adapter; needs the ``titan`` extra).
        backend_options: ``titan`` options: ``flavor`` (registry flavor, e.g. ``1.7B``; default: sized from
            ``config.json``), ``attention`` (``auto``/``sdpa``/``flex``/``varlen``), ``parallelize``,
            ``tensor_parallel_degree``.
        optimizer: Another optimizer by class_path (``torch.optim.SGD`` with ``init_args: {lr: 0.01}``);
            null: AdamW(``lr``, ``weight_decay``).
        lr_scheduler: An LR scheduler by class_path, stepped once per RL step; null: linear warm-up over
            ``warmup_steps``.
        environment: Multi-turn episodes against an ``rlforge.envs.Environment`` (tools, games, OpenEnv) instead of
            one completion per prompt; the environment gives the reward (``reward_fns`` must be unset).
        compile: Run the policy's logprob forwards (the packed layers of ``rlforge.models.packed``, Llama-family
            models) through ``torch.compile``: the training forward, and the reference and proximal forwards when
            the run has them. The first update compiles (~95 s on a 2-core CPU, ~35 s with inductor's cache warm;
            a reference forward adds its no-grad graphs, ~20 s), later ones run ~1.2-1.6x faster there
            (``benchmarks/README.md``). The sampler's decode step compiles through the strategy's
            ``generator_options: {compile: true}``.
        precision: Compute precision of the policy's logprob forwards (training, reference, proximal): ``32-true``,
            or ``bf16-mixed``: fp32 parameters, gradients and optimizer state, the forward under bf16 autocast
            (``rlforge.precision``; ~1.5x faster training forward + backward compiled on an AMX CPU,
            ``benchmarks/bench_precision.py``). The sampler keeps its dtype: its logprobs differ from the
            training forward's by bf16 rounding (~1e-2), inside any clip range.
        peft: PEFT adapters to train instead of the full model, a ``peft`` config by class_path, e.g.
            ``{class_path: peft.LoraConfig, init_args: {r: 8, lora_alpha: 16, target_modules: all-linear}}``
            (needs the ``peft`` extra; ``hf`` backend only). The generator gets the merged weights, the
            reference is the base with adapters disabled, checkpoints hold the adapter folder.
        skip_zero_advantage: Leave rows whose advantages are all 0 (zero-variance groups) out of the training
            forward and backward at every step where that changes nothing: a built-in loss
            (``PolicyLoss.advantage_weighted``) with ``beta == 0`` and ``entropy_coef == 0`` then. The gradient is
            the same (the kept rows' loss is weighted by their share of the batch's normaliser, and one row is kept
            when all are 0, so the optimizer still steps), the update costs less in proportion to
            ``rollout/zero_std_frac``. ``train/entropy`` and the loss's metrics then cover the trained rows;
            ``train/skipped_rows_frac`` reports the share left out.
    """

    def __init__(
        self,
        model: str = DEFAULT_POLICY,
        loss: PolicyLoss | LossModule = _DEFAULT_LOSS,
        group_size: int = 8,
        sampling: SamplingParams = SamplingParams(max_new_tokens=8, temperature=0.7),  # noqa: B008 - immutable in practice
        val_sampling: SamplingParams | None = None,
        reward_fns: Sequence[Reward | RewardFn] | None = None,
        reward_weights: Sequence[float] | None = None,
        reward_timeout_s: float = 5.0,
        max_reward_error_frac: float = 0.1,
        advantage: str = "group",
        lr: float = 3e-5,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        entropy_coef: float = 0.0,
        dtype: str = "float32",
        dynamic_sampling: bool = False,
        max_sampling_tries: int = 4,
        overlong_cache_len: int = 0,
        overlong_penalty: float = 1.0,
        filter_truncated: bool = False,
        chat_template: bool = False,
        system_prompt: str | None = None,
        backend: str = "hf",
        backend_options: dict[str, Any] | None = None,
        peft: Any = None,
        optimizer: OptimizerCallable | None = None,
        lr_scheduler: LRSchedulerCallable | None = None,
        environment: Environment | None = None,
        compile: bool = False,
        precision: str = "32-true",
        skip_zero_advantage: bool = False,
    ) -> None:
        super().__init__(
            model, dtype, lr, weight_decay, warmup_steps, chat_template, system_prompt, backend, backend_options,
            peft, optimizer=optimizer, lr_scheduler=lr_scheduler, precision=precision,
        )  # fmt: skip
        check_loss(loss)
        if environment is not None:
            self.environment = check_environment(environment)
            if reward_fns is not None:
                raise ConfigError(
                    "module.reward_fns is set but module.environment gives the reward; put the reward in the "
                    "environment's step() or unset module.reward_fns"
                )
        rewards = [check_reward(fn, f"module.reward_fns[{i}]") for i, fn in enumerate(reward_fns or [])]
        # Checked here so the message names the user's fields, not RewardRunner's.
        if reward_weights is not None and len(reward_weights) != max(len(rewards), 1):
            raise ConfigError(
                f"module.reward_weights has {len(reward_weights)} entries but module.reward_fns has "
                f"{max(len(rewards), 1)}; give one weight per reward or leave reward_weights unset"
            )
        if not reward_timeout_s > 0:
            raise ConfigError(f"module.reward_timeout_s must be > 0, got {reward_timeout_s}")
        if not 0.0 <= max_reward_error_frac <= 1.0:
            raise ConfigError(f"module.max_reward_error_frac must be in [0, 1], got {max_reward_error_frac}")
        if sampling.greedy:
            raise ConfigError("module.sampling.temperature must be > 0 for RL rollouts (0 is greedy: no exploration)")
        if sampling.seed is not None:  # one fixed seed would draw the same samples at every step
            raise ConfigError(
                "module.sampling.seed is set per request by the rollout engine; seed the run with trainer.seed "
                "(and trainer.sampling_seeds: group for per-group seeds)"
            )
        if sampling.n not in (1, group_size):
            raise ConfigError(
                f"module.sampling.n ({sampling.n}) conflicts with module.group_size ({group_size}); set group_size only"
            )
        if group_size < 1:
            raise ConfigError(f"module.group_size must be >= 1, got {group_size}")
        # Fails early (ConfigError) on an unknown method or G == 1 with a group-normalised advantage.
        compute_advantages(torch.zeros(1, group_size), method=advantage)
        # A fresh loss per module: the shared default must never carry state (beta, metrics) between modules.
        self.loss = GRPOLoss() if loss is _DEFAULT_LOSS else loss
        # A loss outside PolicyLoss's beta contract takes ref_logprobs unconditionally: they must be real.
        self.needs_reference = not isinstance(self.loss, PolicyLoss)
        self.group_size = group_size
        self.sampling = dataclasses.replace(sampling, n=group_size)
        self.val_sampling = (
            val_sampling
            if val_sampling is not None
            else SamplingParams(max_new_tokens=sampling.max_new_tokens, temperature=0.0)
        )
        self.reward_runner = RewardRunner(
            rewards or [MathReward()],
            weights=reward_weights,
            timeout_s=reward_timeout_s,
            max_error_frac=max_reward_error_frac,
        )
        self._accuracy = MathReward()
        self.advantage = advantage
        self.entropy_coef = entropy_coef
        if max_sampling_tries < 1:
            raise ConfigError(f"module.max_sampling_tries must be >= 1, got {max_sampling_tries}")
        if not 0 <= overlong_cache_len < self.sampling.max_new_tokens:
            raise ConfigError(
                f"module.overlong_cache_len must be in [0, sampling.max_new_tokens={self.sampling.max_new_tokens}), "
                f"got {overlong_cache_len}"
            )
        self.compile_forward = compile  # not `self.compile`: that is nn.Module.compile()
        if skip_zero_advantage and not getattr(self.loss, "advantage_weighted", False):
            raise ConfigError(
                f"module.skip_zero_advantage needs a loss whose gradient vanishes at zero advantage (a built-in "
                f"rlforge.losses loss, or a PolicyLoss with advantage_weighted = True); {type(self.loss).__name__} "
                "does not declare it"
            )
        self.skip_zero_advantage = skip_zero_advantage
        self.rollout_options = RolloutOptions(
            dynamic_sampling, max_sampling_tries, overlong_cache_len, overlong_penalty, filter_truncated
        )

    @property
    def beta(self) -> float:
        return float(getattr(self.loss, "beta", 0.0))

    @beta.setter
    def beta(self, value: float) -> None:
        if not hasattr(self.loss, "beta"):
            raise ConfigError(f"{type(self.loss).__name__} has no KL coefficient `beta` to set")
        self.loss.beta = float(value)

    def score(self, groups: list[Group], scorer: Scorer | None = None) -> dict[str, float]:
        """Scores with ``scorer`` (reward workers of the strategy) or, by default, this module's ``reward_runner``.

        Episodes of an ``environment`` already carry its reward: only their metrics are returned.
        """
        episodes = [ep for group in groups for ep in group]
        if self.environment is not None:
            return {"reward/env": sum(ep.reward for ep in episodes) / max(len(episodes), 1)}
        result = (scorer or self.reward_runner)(
            [ep.prompt for ep in episodes], [ep.completion.text for ep in episodes], [ep.target for ep in episodes]
        )
        for ep, reward, breakdown in zip(episodes, result.rewards, result.breakdown, strict=True):
            ep.reward, ep.reward_breakdown = float(reward), dict(breakdown)
        return dict(result.metrics)

    def configure_rollout(self) -> RolloutOptions:
        return self.rollout_options

    def compute_advantages(self, groups: list[Group]) -> None:
        rewards = torch.tensor([[ep.reward for ep in group] for group in groups], dtype=torch.float64)
        advantages = compute_advantages(rewards, method=self.advantage)
        for group, row in zip(groups, advantages.tolist(), strict=True):
            for ep, adv in zip(group, row, strict=True):
                ep.advantage = float(adv)

    def split_for_accumulation(self, batch: TrainBatch) -> list[tuple[TrainBatch, float]]:
        """The whole batch, or with ``skip_zero_advantage`` its rows with a non-zero advantage, weighted by
        their share of the batch's loss normaliser (``rlforge.parallel.loss_scale``)."""
        if not (self.skip_zero_advantage and self.beta == 0 and not self.entropy_coef):
            return [(batch, 1.0)]
        trained = batch.advantages.reshape(len(batch), -1).ne(0).any(dim=1)
        if trained.all():
            self.log("train/skipped_rows_frac", 0.0, weight=len(batch))
            return [(batch, 1.0)]
        # All zero: one row still runs, so its exact zero gradient reaches the optimizer, which steps as it would
        # (AdamW's moments move on), and every rank of a sharded policy runs its forward.
        rows = trained.nonzero().squeeze(1) if trained.any() else torch.zeros(1, dtype=torch.long)
        self.log("train/skipped_rows_frac", 1.0 - len(rows) / len(batch), weight=len(batch))
        part = batch.select(rows.to(batch.input_ids.device))
        mask, aggregation, max_len = self.loss_normalizer(batch)
        share = loss_share(Normaliser.of(self.loss_normalizer(part)[0]), Normaliser.of(mask), aggregation, max_len)
        return [(part, share)]

    def training_step(self, batch: TrainBatch) -> torch.Tensor:
        logprobs, entropy = compute_logprobs(
            self.policy,
            batch.input_ids,
            batch.attention_mask,
            batch.prompt_len,
            temperature=self.sampling.temperature,
            with_entropy=True,
            entropy_grad=bool(self.entropy_coef),  # logged only: keep it out of the backward pass
            compile=self.compile_forward,
            precision=self.precision,
        )
        loss = call_loss(
            self.loss, logprobs, batch.ref_logprobs, batch.advantages, batch.response_mask, batch.old_logprobs
        )
        mask = batch.response_mask
        mean_entropy = (entropy * mask).sum() / mask.sum().clamp(min=1.0)
        if self.entropy_coef:
            loss = loss - self.entropy_coef * mean_entropy
        # Per-token means: weighted by their tokens, so micro-batches and ranks of unequal lengths average to the
        # one-process value.
        tokens = max(float(mask.sum()), 1.0)
        self.log("train/entropy", mean_entropy, weight=tokens)
        for name, value in getattr(self.loss, "last_metrics", {}).items():
            self.log(f"train/{name}", value, weight=tokens)
        return loss

    def is_correct(self, prompt: str, response: str, target: str) -> bool:
        return self._accuracy(prompt, response, target) >= 1.0

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Callbacks (KLMonitor, EntropyCollapseGuard) adapt these during a run: resume must continue from them.
        checkpoint["module_coefficients"] = {"beta": self.beta, "entropy_coef": self.entropy_coef}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        coefficients = checkpoint.get("module_coefficients", {})
        self.entropy_coef = float(coefficients.get("entropy_coef", self.entropy_coef))
        if hasattr(self.loss, "beta") and "beta" in coefficients:
            self.loss.beta = float(coefficients["beta"])
