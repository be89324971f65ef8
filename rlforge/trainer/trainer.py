"""``RLTrainer``: owns the rollout -> update loop. Read ``fit`` top to bottom.

One RL step, in the order a paper lists it::

    prompts -> rollouts (G per prompt) -> rewards -> advantages -> reference logprobs (beta > 0)
      -> for each PPO epoch and minibatch: loss -> backward -> clip -> optimizer step
      -> weight sync (every sync_interval steps) -> validation -> checkpoint
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from jsonargparse import lazy_instance

from rlforge.callbacks import Callback, ModelCheckpoint, ProgressBar, WeightSync
from rlforge.checkpoint_io import seed_everything, unwritable_reason
from rlforge.data import RLDataModule, collate_episodes
from rlforge.data.limits import model_prompt_limit
from rlforge.errors import ConfigError, NonFiniteError
from rlforge.loggers import CSVLogger, Logger
from rlforge.metrics import StepReducer, reduction_of, register_reduction, rollout_metrics
from rlforge.module import RLModule
from rlforge.shaping import dynamic_sample, mask_truncated
from rlforge.strategies import LocalStrategy, Strategy
from rlforge.trainer import checkpointing
from rlforge.trainer.call import call_exception_hooks, call_hook, order_callbacks
from rlforge.trainer.manifest import finish_run, write_manifest
from rlforge.trainer.progress import Progress
from rlforge.trainer.validation import validate_rows
from rlforge.types import Group, TrainBatch

_DEFAULT_STRATEGY = lazy_instance(LocalStrategy)


def batch_tokens(batch: Any) -> float:
    """Tokens an update learns from: response tokens (RL) or label tokens (SFT)."""
    return float(batch.response_mask.sum()) if isinstance(batch, TrainBatch) else float(batch.num_label_tokens)


def _nonfinite_grad_name(model: torch.nn.Module) -> str:
    """``gradient of <first parameter whose gradient has NaN/inf>`` (the gradient norm was not finite)."""
    for name, param in model.named_parameters():
        if param.grad is not None and not torch.isfinite(param.grad).all():
            return f"gradient of {name}"
    return "gradient norm"


class RLTrainer:
    """Runs RL post-training of an ``RLModule`` on prompts from an ``RLDataModule``.

    Args:
        max_steps: Number of RL steps (rollout + update + sync).
        strategy: Where the generator/reference run; default ``LocalStrategy()``.
        callbacks: Extra callbacks. ``WeightSync``, ``ModelCheckpoint`` and ``ProgressBar`` are added when
            absent (the last two unless disabled below).
        logger: A logger, a list of loggers, ``True`` for ``CSVLogger`` or ``False`` for none.
        val_check_interval: Validate every N steps (and after the last step); ``None`` or 0 disables.
        val_at_start: Also validate before the first step (logged at step 0).
        ppo_epochs: Passes over each rollout batch.
        minibatch_size: Episodes per optimizer step (``None``: the whole rollout batch).
        grad_clip: Max global gradient norm, > 0 (``None`` disables clipping).
        max_consecutive_skips: Non-finite loss/gradient steps in a row that stop the run.
        seed: Seed of Python, NumPy, torch and the sampler.
        default_root_dir: Root of run folders and checkpoints.
        enable_checkpointing: Add a default ``ModelCheckpoint`` when none is given.
        enable_progress_bar: Add a default ``ProgressBar`` when none is given.
    """

    def __init__(
        self,
        max_steps: int = 300,
        strategy: Strategy = _DEFAULT_STRATEGY,
        callbacks: list[Callback] | None = None,
        logger: Logger | list[Logger] | bool = True,
        val_check_interval: int | None = 50,
        val_at_start: bool = True,
        ppo_epochs: int = 1,
        minibatch_size: int | None = None,
        grad_clip: float | None = 1.0,
        max_consecutive_skips: int = 3,
        seed: int = 0,
        default_root_dir: str = "rlforge_runs",
        enable_checkpointing: bool = True,
        enable_progress_bar: bool = True,
    ) -> None:
        for name, value in (("max_steps", max_steps), ("ppo_epochs", ppo_epochs)):
            if value < 1:
                raise ConfigError(f"trainer.{name} must be >= 1, got {value}")
        if minibatch_size is not None and minibatch_size < 1:
            raise ConfigError(f"trainer.minibatch_size must be >= 1 or null, got {minibatch_size}")
        # A negative max_norm makes clip_grad_norm_ scale by a negative factor: the update would climb the loss.
        if grad_clip is not None and not grad_clip > 0:
            raise ConfigError(f"trainer.grad_clip must be > 0 (null disables clipping), got {grad_clip}")
        self.max_steps, self.ppo_epochs, self.minibatch_size = max_steps, ppo_epochs, minibatch_size
        self.val_check_interval, self.val_at_start = val_check_interval or 0, val_at_start
        self.grad_clip, self.max_consecutive_skips = grad_clip, max_consecutive_skips
        self.seed, self.default_root_dir = seed, default_root_dir
        # A fresh strategy per trainer: the shared default object must never hold another run's workers.
        self.strategy: Strategy = LocalStrategy() if strategy is _DEFAULT_STRATEGY else strategy

        callbacks = list(callbacks or [])
        if not any(isinstance(cb, WeightSync) for cb in callbacks):
            callbacks.append(WeightSync())
        if enable_checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in callbacks):
            callbacks.append(ModelCheckpoint())
        if enable_progress_bar and not any(isinstance(cb, ProgressBar) for cb in callbacks):
            callbacks.append(ProgressBar())
        self.callbacks: list[Callback] = order_callbacks(callbacks)
        if logger is True:
            self.loggers: list[Logger] = [CSVLogger()]
        elif logger is False or logger is None:
            self.loggers = []
        else:
            self.loggers = list(logger) if isinstance(logger, (list, tuple)) else [logger]

        self.progress = Progress()
        self.module: RLModule | None = None
        self.datamodule: RLDataModule | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: Any = None
        self.stage: str | None = None
        self.should_stop = False
        self.callback_metrics: dict[str, float] = {}
        self.run_config: dict[str, Any] | None = None  # set by the CLI: the resolved YAML config
        self._step_metrics: dict[str, list[float]] = defaultdict(list)
        self._consecutive_skips = 0

    # ------------------------------------------------------------------------------------ properties
    @property
    def global_step(self) -> int:
        """Completed RL steps."""
        return self.progress.steps

    @property
    def policy_version(self) -> int:
        """Version of the trainable policy's weights (one per completed step)."""
        return self.progress.steps

    @property
    def weight_sync(self) -> WeightSync:
        return next(cb for cb in self.callbacks if isinstance(cb, WeightSync))

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        return next((cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)), None)

    @property
    def log_dir(self) -> Path:
        """Folder of this run: the first logger's, else ``default_root_dir``."""
        return self.loggers[0].log_dir if self.loggers else Path(self.default_root_dir)

    # ------------------------------------------------------------------------------------ entry points
    def fit(self, module: RLModule, datamodule: RLDataModule | None = None, ckpt_path: str | None = None) -> None:
        """Trains ``module`` for ``max_steps`` RL steps; ``ckpt_path`` (a folder or ``"last"``) resumes."""
        self._run("fit", module, datamodule, ckpt_path)

    def validate(
        self, module: RLModule, datamodule: RLDataModule | None = None, ckpt_path: str | None = None
    ) -> dict[str, float]:
        """Evaluates ``module`` on the held-out prompts and returns the ``val/*`` metrics."""
        self._run("validate", module, datamodule, ckpt_path)
        return {k: v for k, v in self.callback_metrics.items() if k.startswith("val/")}

    def prepare(self, module: RLModule, datamodule: RLDataModule | None = None, stage: str = "fit") -> None:
        """Sets up module, data, strategy and optimizer without running a loop (for ``train_step`` use)."""
        self.stage, self.module, self.should_stop = stage, module, False
        self.datamodule = datamodule if datamodule is not None else RLDataModule()
        module.trainer = self
        self._bind_run_folder()
        seed_everything(self.seed)
        call_hook(self, "setup", stage)
        module.configure_model()
        self.datamodule.setup()
        if hasattr(self.datamodule, "limit_prompt_lengths"):  # before any rollout: a 1 MB prompt would never finish
            skipped = self.datamodule.limit_prompt_lengths(module.encode_prompt, *model_prompt_limit(module))
            if skipped:
                self._log_metric("data/skipped_prompts", skipped)
        self.strategy.setup(self, module)
        if stage == "fit":
            self._configure_optimizers()

    def _bind_run_folder(self) -> None:
        """Creates the run folder and checks it takes files now, so a bad path fails before step 1."""
        try:
            for logger in self.loggers:
                if hasattr(logger, "bind"):
                    logger.bind(self.default_root_dir)
        except OSError as err:
            raise ConfigError(
                f"trainer.default_root_dir: cannot create the run folder ({err.strerror}: {err.filename})"
            ) from None
        reason = unwritable_reason(self.log_dir)
        if reason is not None:
            raise ConfigError(f"trainer.default_root_dir: cannot write the run folder {self.log_dir} ({reason})")

    def _run(self, stage: str, module: RLModule, datamodule: RLDataModule | None, ckpt_path: str | None) -> None:
        status, started, manifest = "failed", time.monotonic(), None
        try:
            self.prepare(module, datamodule, stage)
            manifest = self._write_manifest()
            if ckpt_path is not None:
                checkpointing.restore(self, ckpt_path)
            if stage == "fit":
                self._fit_loop()
            elif not self.datamodule.val_dataset():
                raise ConfigError(
                    "validate: no held-out rows (set data.val_file, data.val_split of data.dataset, "
                    "data.val_fraction or data.task)"
                )
            else:
                self._validate_and_log()
            status = "success"
        except KeyboardInterrupt as err:
            status = "interrupted"
            call_exception_hooks(self, err)
            raise
        except BaseException as err:
            call_exception_hooks(self, err)
            raise
        finally:
            try:
                call_hook(self, "teardown", stage)
            finally:
                self.strategy.teardown()
                for logger in self.loggers:
                    logger.finalize(status)
                if manifest is not None:
                    finish_run(self, manifest, status, time.monotonic() - started)

    # ---------------------------------------------------------------------------------------- the loop
    def _fit_loop(self) -> None:
        call_hook(self, "on_fit_start")
        call_hook(self, "on_train_start")
        if self.val_at_start and self.global_step == 0 and self.val_check_interval:
            self._validate_and_log()
        while self.global_step < self.max_steps and not self.should_stop:
            self._train_step()
        call_hook(self, "on_train_end")
        call_hook(self, "on_fit_end")

    def _train_step(self) -> None:
        module, start = self.module, time.perf_counter()
        if module.supervised:  # SFT: a fixed batch instead of rollouts, no generator to sync
            batch, rollout_s = module.collate(self.datamodule.next_batch()).to(self.strategy.root_device), 0.0
            self._update(batch)
            self.progress.steps += 1
        else:
            call_hook(self, "on_rollout_start")
            groups, batch = self._rollout()
            call_hook(self, "on_rollout_end", groups)
            rollout_s = time.perf_counter() - start
            self._update(batch)
            self.progress.steps += 1
            if self.weight_sync.should_sync(self):
                call_hook(self, "on_weight_sync_start")
                self.weight_sync.sync(self, module)
                call_hook(self, "on_weight_sync_end")
        self._log_metric("perf/train_s", time.perf_counter() - start - rollout_s)

        last = self.global_step >= self.max_steps
        if self.val_check_interval and (self.global_step % self.val_check_interval == 0 or last):
            self._run_validation()

        step_s = time.perf_counter() - start
        self._log_metric("perf/rollout_s", rollout_s)
        self._log_metric("perf/step_s", step_s)
        self._log_metric("perf/tokens_per_s", batch_tokens(batch) / max(step_s, 1e-9))
        metrics = self._flush_metrics()
        call_hook(self, "on_train_step_end", metrics)
        for callback in self.callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.should_save(self):
                callback.save(self)

    def _rollout(self) -> tuple[list[Group], TrainBatch]:
        """Samples, scores and prepares one batch: rollouts -> rewards -> advantages -> ref logprobs."""
        module = self.module

        def sample() -> list[Group]:
            groups = self.strategy.next_rollout(module, self.datamodule)
            for name, value in self.strategy.score(module, groups).items():
                self._log_metric(name, value)
            return groups

        if module.dynamic_sampling:
            groups, stats = dynamic_sample(sample, self.datamodule.batch_size, module.max_sampling_tries)
            for name, value in stats.items():
                self._log_metric(name, value)
        else:
            groups = sample()
        module.compute_advantages(groups)
        episodes = [ep for group in groups for ep in group]
        batch = collate_episodes(episodes, module.tokenizer.pad_token_id, self.strategy.root_device)
        if module.filter_truncated:
            batch.response_mask = mask_truncated(episodes, batch.response_mask)
        batch = self.strategy.prepare_batch(module, batch)
        if module.beta > 0 or module.needs_reference:  # needs_reference: KL measured (KLMonitor) or beta adapted
            batch.ref_logprobs = self.strategy.reference_logprobs(module, batch)
            for ep, row in zip(episodes, batch.ref_logprobs.tolist(), strict=True):
                ep.ref_logprobs = row[: len(ep.completion.token_ids)]
        self.progress.rollouts += 1
        for name, value in rollout_metrics(groups, self.policy_version).items():
            self._log_metric(name, value)
        return groups, batch

    def _update(self, batch: TrainBatch) -> None:
        """``ppo_epochs`` passes of minibatch updates over the rollout batch."""
        module, size = self.module, len(batch)
        mb_size = min(self.minibatch_size or size, size)
        module.policy.train()
        batch_idx = 0
        for _ in range(self.ppo_epochs):
            order = torch.randperm(size) if (self.ppo_epochs > 1 or mb_size < size) else torch.arange(size)
            for begin in range(0, size, mb_size):
                minibatch = batch.select(order[begin : begin + mb_size].to(batch.input_ids.device))
                call_hook(self, "on_train_batch_start", minibatch, batch_idx)
                loss = self._optimizer_step(minibatch)
                call_hook(self, "on_train_batch_end", {"loss": loss}, minibatch, batch_idx)
                batch_idx += 1
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.progress.samples += size
        self.progress.tokens += int(batch_tokens(batch))

    def _optimizer_step(self, minibatch: Any) -> torch.Tensor:
        """loss -> backward (per micro-batch) -> clip -> step (skipped, and counted, when anything is non-finite)."""
        loss = torch.zeros(())
        for part, weight in self.module.split_for_accumulation(minibatch):
            out = self.module.training_step(part)
            part_loss = (out["loss"] if isinstance(out, dict) else out) * weight
            call_hook(self, "on_before_backward", part_loss)
            part_loss.backward()
            call_hook(self, "on_after_backward")
            loss = loss + part_loss.detach().cpu()
        params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        max_norm = self.grad_clip if self.grad_clip else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)
        call_hook(self, "on_before_optimizer_step", self.optimizer)
        loss_value, norm_value = float(loss), float(grad_norm)
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            self.optimizer.step()
            self.progress.optimizer_steps += 1
            self._consecutive_skips = 0
        else:
            self._skip_step(loss_value, norm_value)
        self.optimizer.zero_grad(set_to_none=True)
        self._log_metric("train/loss", loss_value)
        self._log_metric("train/grad_norm", norm_value)
        self._log_metric("train/lr", self.optimizer.param_groups[0]["lr"])
        return loss

    def _skip_step(self, loss_value: float, norm_value: float) -> None:
        self.progress.skipped_steps += 1
        self._consecutive_skips += 1
        self._log_metric("train/skipped_steps", 1.0)
        if self._consecutive_skips >= self.max_consecutive_skips:
            culprit = "loss" if not math.isfinite(loss_value) else _nonfinite_grad_name(self.module.policy)
            raise NonFiniteError(
                f"step {self.global_step + 1}: non-finite {culprit} (loss={loss_value}, grad_norm={norm_value}) "
                f"in {self._consecutive_skips} consecutive updates; lower the lr or check the loss"
            )

    # ----------------------------------------------------------------------------------- validation
    def _run_validation(self) -> None:
        call_hook(self, "on_validation_start")
        rows = self.datamodule.val_dataset()
        if rows:
            for name, value in validate_rows(self.module, self.strategy, rows).items():
                self._log_metric(name, value)
            if self.module.supervised:
                self._log_metric("val/loss", self.module.validation_loss(rows))
        call_hook(self, "on_validation_end")

    def _validate_and_log(self) -> None:
        self._run_validation()
        self._flush_metrics()

    # -------------------------------------------------------------------------------------- logging
    def _log_metric(self, name: str, value: float, reduce: str | None = None) -> None:
        """Records ``value`` for this step; ``reduce`` (``mean``/``sum``/``max``) overrides the name's registration
        (``rlforge.metrics.register_reduction``; counts such as ``reward/errors`` are summed, the rest averaged)."""
        if reduce is not None:
            register_reduction(name, reduce)
        self._step_metrics[name].append(float(value))

    def _flush_metrics(self) -> dict[str, float]:
        """Reduces what was logged this step (torchmetrics aggregators), sends it to the loggers and returns it."""
        reducer = self.__dict__.setdefault("_reducer", StepReducer())  # one per trainer: aggregators are reused
        metrics = {k: reducer.reduce(k, v, reduction_of(k)) for k, v in self._step_metrics.items() if v}
        self._step_metrics = defaultdict(list)
        self.callback_metrics.update(metrics)
        for logger in self.loggers:
            logger.log_metrics(metrics, self.global_step)
        return metrics

    def _write_manifest(self) -> Path:
        config, path = self.run_config, self.log_dir / "run.json"
        write_manifest(path, config, self.seed, self.stage)
        for logger in self.loggers:
            logger.log_hyperparams(config or {"seed": self.seed, "max_steps": self.max_steps})
        return path

    # ---------------------------------------------------------------------------------- optimizers
    def _configure_optimizers(self) -> None:
        out = self.module.configure_optimizers()
        if isinstance(out, dict):
            self.optimizer, self.lr_scheduler = out["optimizer"], out.get("lr_scheduler")
        else:
            self.optimizer, self.lr_scheduler = out, None

    def save_checkpoint(self, path: str | Path) -> Path:
        """Writes a full checkpoint (HF policy folder + trainer state) atomically to ``path``."""
        return checkpointing.save(self, Path(path))

    # ------------------------------------------------------------------------ seed-format adapter
    def train_step(self, inputs: list[dict[str, torch.Tensor]], targets: list[dict[str, torch.Tensor]]) -> float:
        """One optimizer step on batches in torchforge's dict format; returns the mean loss.

        ``inputs[i]["tokens"]`` is ``[B, P + T]`` (left-padded prompt, right-padded response); ``targets[i]``
        holds ``response`` ``[B, T]``, ``ref_logprobs`` ``[B, T]``, ``advantages`` ``[B]`` or ``[B, 1]`` and
        ``padding_mask`` ``[B, T]``. Each ``(input, target)`` pair is a micro-batch; gradients are averaged.
        """
        if self.module is None or self.optimizer is None:
            raise RuntimeError("train_step() needs a prepared module: call trainer.prepare(module) first")
        from rlforge.trainer.adapters import batch_from_dicts

        batches = [
            batch_from_dicts(i, t, self.module.tokenizer.pad_token_id) for i, t in zip(inputs, targets, strict=True)
        ]
        self.module.policy.train()
        total = 0.0
        for batch in batches:
            loss = self.module.training_step(batch.to(self.strategy.root_device))
            loss = loss["loss"] if isinstance(loss, dict) else loss
            (loss / len(batches)).backward()
            total += float(loss.detach())
        params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._step_metrics = defaultdict(list)  # train_step is used outside fit: drop per-step logs
        return total / len(batches)
