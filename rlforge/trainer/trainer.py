"""``RLTrainer``: owns the rollout -> update loop. Read ``run_step`` top to bottom.

One RL step, in the order a paper lists it::

    prompts -> rollouts (G per prompt) -> rewards -> advantages -> reference logprobs (beta > 0)
      -> for each PPO epoch and minibatch: loss -> backward -> clip -> optimizer step
      -> weight sync (every sync_interval steps) -> validation -> metrics -> checkpoint (ModelCheckpoint's hook)

The rollout half is the ``RolloutEngine`` (``rlforge.rollout``) over the strategy's ``Services``; the update half
is ``rlforge.trainer.optimization``. See docs/DESIGN.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from jsonargparse import lazy_instance

from rlforge.callbacks import Callback
from rlforge.callbacks.defaults import configure_callbacks, find_checkpoint_callback
from rlforge.checkpoint_io import seed_everything, unwritable_reason
from rlforge.data import RLDataModule
from rlforge.data.limits import model_prompt_limit
from rlforge.errors import ConfigError
from rlforge.loggers import Logger, configure_loggers
from rlforge.metrics import Reduce
from rlforge.module import RLModule
from rlforge.parallel.fsdp import is_sharded
from rlforge.parallel.process_group import run_on_rank_zero
from rlforge.parallel.shard import check_divisible
from rlforge.services import RunContext, Services
from rlforge.strategies import LocalStrategy, Strategy
from rlforge.trainer import checkpointing
from rlforge.trainer.call import call_exception_hooks, call_hook, order_callbacks
from rlforge.trainer.distributed import DistributedRun, check_sampling_seeds, validation_share
from rlforge.trainer.manifest import finish_run, write_manifest
from rlforge.trainer.optimization import batch_tokens, configure_optimizers, update
from rlforge.trainer.progress import Progress
from rlforge.trainer.sources import BatchSource, batch_source
from rlforge.trainer.step_metrics import StepMetrics
from rlforge.trainer.validation import validate_rows

_DEFAULT_STRATEGY = lazy_instance(LocalStrategy)


class RLTrainer:
    """Runs RL post-training of an ``RLModule`` on prompts from an ``RLDataModule``.

    Args:
        max_steps: Number of RL steps (rollout + update + sync).
        strategy: Where the generator/reference run; default ``LocalStrategy()``.
        callbacks: Extra callbacks. ``ModelCheckpoint`` and ``ProgressBar`` are added when absent (unless
            disabled below).
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
        sync_interval: Push the policy's weights to the generator every N steps (``null``: 1, or what a
            ``WeightSync`` callback sets).
        sampling_seeds: ``stream``: each generator samples from its own RNG stream. ``group``: each group
            samples from its own seed drawn from ``seed``, so rollouts do not depend on how the groups are
            batched or split over ranks (a 2-rank run samples what a 1-process run does). ``auto``: ``group``
            with more than one rank, else ``stream``.
        dist_timeout_s: With several ranks (``torchrun``, ``srun``): how long the rendezvous and every collective
            may wait before the run stops with an error naming the cause.
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
        sync_interval: int | None = None,
        sampling_seeds: str = "auto",
        dist_timeout_s: float = 300.0,
    ) -> None:
        for name, value in (("max_steps", max_steps), ("ppo_epochs", ppo_epochs), ("sync_interval", sync_interval)):
            if value is not None and value < 1:
                raise ConfigError(f"trainer.{name} must be >= 1, got {value}")
        if minibatch_size is not None and minibatch_size < 1:
            raise ConfigError(f"trainer.minibatch_size must be >= 1 or null, got {minibatch_size}")
        # A negative max_norm makes clip_grad_norm_ scale by a negative factor: the update would climb the loss.
        if grad_clip is not None and not grad_clip > 0:
            raise ConfigError(f"trainer.grad_clip must be > 0 (null disables clipping), got {grad_clip}")
        self.max_steps, self.ppo_epochs, self.minibatch_size = max_steps, ppo_epochs, minibatch_size
        self.val_check_interval, self.val_at_start = val_check_interval or 0, val_at_start
        self.grad_clip, self.max_consecutive_skips = grad_clip, max_consecutive_skips
        check_sampling_seeds(sampling_seeds)
        if not dist_timeout_s > 0:
            raise ConfigError(f"trainer.dist_timeout_s must be > 0, got {dist_timeout_s}")
        self.seed, self.default_root_dir = seed, default_root_dir
        self.sampling_seeds, self.dist_timeout_s = sampling_seeds, dist_timeout_s
        self._sync_interval = sync_interval
        # A fresh strategy per trainer: the shared default object must never hold another run's workers.
        self.strategy: Strategy = LocalStrategy() if strategy is _DEFAULT_STRATEGY else strategy
        callbacks = configure_callbacks(callbacks, enable_checkpointing, enable_progress_bar)
        self.callbacks: list[Callback] = order_callbacks(callbacks)
        self._loggers: list[Logger] = configure_loggers(logger)
        self.distributed: DistributedRun | None = None  # set by prepare: this process's rank in the run
        self._run_dir: Path | None = None

        self.progress = Progress()
        self.module: RLModule | None = None
        self.datamodule: RLDataModule | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: Any = None
        self.stage: str | None = None
        self.should_stop = False
        self.callback_metrics: dict[str, float] = {}
        self.run_config: dict[str, Any] | None = None  # set by the CLI: the resolved YAML config
        self.services: Services | None = None
        self.rollout: BatchSource | None = None
        self.consecutive_skips = 0
        self.metrics = StepMetrics(self.loggers, self.callback_metrics)

    # ------------------------------------------------------------------------------------ properties
    @property
    def global_rank(self) -> int:
        """This process's rank in a data-parallel run (0 alone)."""
        return self.distributed.rank if self.distributed is not None else 0

    @property
    def world_size(self) -> int:
        """Number of ranks of the run (``torchrun``/``srun`` tasks; 1 alone)."""
        return self.distributed.world_size if self.distributed is not None else 1

    @property
    def data_parallel_size(self) -> int:
        """Number of data-parallel replicas (``world_size / tensor_parallel_degree``; 1 alone)."""
        return self.distributed.dp_size if self.distributed is not None else 1

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes the run folder, loggers and checkpoint files."""
        return self.global_rank == 0

    @property
    def loggers(self) -> list[Logger]:
        """The run's loggers; empty on ranks other than 0 (one run writes one set of logs)."""
        return self._loggers if self.is_global_zero else []

    @property
    def global_step(self) -> int:
        """Completed RL steps."""
        return self.progress.steps

    @property
    def policy_version(self) -> int:
        """Version of the trainable policy's weights (one per completed step)."""
        return self.progress.steps

    @property
    def sync_interval(self) -> int:
        """Steps between weight syncs."""
        return self._sync_interval or 1

    @sync_interval.setter
    def sync_interval(self, value: int) -> None:
        if self._sync_interval is not None and value != self._sync_interval:
            raise ConfigError(f"trainer.sync_interval is {self._sync_interval} but a WeightSync callback asks {value}")
        self._sync_interval = value

    @property
    def checkpoint_callback(self) -> Any:
        """The ``ModelCheckpoint`` in use, else ``None``."""
        return find_checkpoint_callback(self.callbacks)

    @property
    def log_dir(self) -> Path:
        """Folder of this run: the first logger's, else ``default_root_dir`` (rank 0's, on every rank)."""
        if self._run_dir is not None:
            return self._run_dir
        return self.loggers[0].log_dir if self.loggers else Path(self.default_root_dir)

    def log(
        self, name: str, value: float | torch.Tensor, reduce: Reduce | str | None = None, weight: float = 1.0
    ) -> None:
        """Records a step metric; ``reduce``: mean/sum/max/last (default by name); ``weight``: its weight in a mean."""
        self.metrics.record(name, float(value.detach() if isinstance(value, torch.Tensor) else value), reduce, weight)

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
        """Sets up module, data, services and optimizer without running a loop (for ``train_step`` use)."""
        self.stage, self.module, self.should_stop = stage, module, False
        self.datamodule = datamodule if datamodule is not None else RLDataModule()
        module.trainer = self
        if self.distributed is None or not self.distributed.active:
            self.distributed = DistributedRun(self.strategy.root_device, self.dist_timeout_s)
        self.metrics = StepMetrics(self.loggers, self.callback_metrics)
        self._bind_run_folder()
        seed_everything(self.seed)
        call_hook(self, "setup", stage)
        module.configure_model()
        self.distributed.bind_policy(module.policy)  # a tensor-parallel group is one data-parallel replica
        self.datamodule.setup()
        if hasattr(self.datamodule, "limit_prompt_lengths"):  # before any rollout: a 1 MB prompt would never finish
            skipped = self.datamodule.limit_prompt_lengths(module.encode_prompt, *model_prompt_limit(module))
            if skipped and self.is_global_zero:  # every rank filters the same rows: count them once
                self.log("data/skipped_prompts", skipped, Reduce.SUM)
        ctx = RunContext(
            seed=self.seed, stage=stage, device=self.strategy.root_device, sync_interval=self.sync_interval,
            max_steps=self.max_steps, log=self.log, rank=self.distributed.dp_rank, world_size=self.data_parallel_size,
            group_seeds=self.distributed.group_seeds(self.sampling_seeds),
        )  # fmt: skip
        if self.minibatch_size:
            check_divisible(self.minibatch_size, self.data_parallel_size, "trainer.minibatch_size")
        self.services = self.strategy.build(ctx, module)
        if stage == "fit" and self.world_size > 1:
            self.strategy.parallelize(ctx, module)  # after build: generators and the reference copy full weights
        self.rollout = batch_source(self.services, self.datamodule, module, ctx)
        if stage == "fit":
            self.optimizer, self.lr_scheduler = configure_optimizers(module)

    def rollout_state(self, step_only: bool = False) -> dict[str, Any]:
        """Generator-side state for checkpoints (``step_only``: the part a step changes before its weights do)."""
        return self.rollout.state_dict(self.policy_version, step_only) if self.rollout is not None else {}

    def sync_weights(self) -> None:
        """Pushes the policy's weights to the generator now (``on_weight_sync_*`` hooks around it)."""
        if self.services is None or self.services.payload is None:
            return
        call_hook(self, "on_weight_sync_start")
        self.services.sync(self.policy_version, self.log)
        call_hook(self, "on_weight_sync_end")

    def _bind_run_folder(self) -> None:
        """Creates the run folder and checks it takes files now, so a bad path fails before step 1.

        Rank 0 alone creates it; the other ranks learn its path (checkpoints go under it)."""
        self._run_dir = None
        folder = run_on_rank_zero(self._create_run_folder)
        if self.world_size > 1:
            self._run_dir = Path(folder)

    def _create_run_folder(self) -> str:
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
        return str(self.log_dir)

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
                self._run_validation()
                self.metrics.flush(self.global_step)
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
                self.services = self.rollout = None
                for logger in self.loggers:
                    logger.finalize(status)
                if manifest is not None and self.is_global_zero:
                    finish_run(self, manifest, status, time.monotonic() - started)
                if self.distributed is not None:
                    self.distributed.close()

    # ---------------------------------------------------------------------------------------- the loop
    def _fit_loop(self) -> None:
        call_hook(self, "on_fit_start")
        call_hook(self, "on_train_start")
        if self.val_at_start and self.global_step == 0 and self.val_check_interval:
            self._run_validation()
            self.metrics.flush(self.global_step)
        while self.global_step < self.max_steps and not self.should_stop:
            self.run_step()
        call_hook(self, "on_train_end")
        call_hook(self, "on_fit_end")

    def run_step(self) -> None:
        """One RL step, in paper order: rollout -> update -> weight sync -> validation -> metrics -> hooks.

        ``fit`` calls it ``max_steps`` times; a driver that interleaves rlforge with other work (a benchmark, a
        notebook) may call it on a ``prepare``d trainer.
        """
        start = time.perf_counter()
        self.metrics.open()
        call_hook(self, "on_rollout_start")
        groups, batch = self.rollout.next(self.global_step)  # rollouts, rewards, advantages, ref logprobs
        self.progress.rollouts += 1
        call_hook(self, "on_rollout_end", groups)
        rollout_s = time.perf_counter() - start
        update(self, batch)  # PPO epochs x minibatches of loss -> backward -> clip -> step
        self.progress.steps += 1
        if self.global_step % self.sync_interval == 0:
            self.sync_weights()
        self.log("perf/train_s", time.perf_counter() - start - rollout_s)
        last = self.global_step >= self.max_steps
        if self.val_check_interval and (self.global_step % self.val_check_interval == 0 or last):
            self._run_validation()
        step_s = time.perf_counter() - start
        self.log("perf/rollout_s", rollout_s)
        self.log("perf/step_s", step_s)
        self.log("perf/tokens_per_s", batch_tokens(batch) / max(step_s, 1e-9))
        call_hook(self, "on_train_step_end", self.metrics.flush(self.global_step))  # ModelCheckpoint saves here

    # ----------------------------------------------------------------------------------- validation
    def _run_validation(self) -> None:
        call_hook(self, "on_validation_start")
        rows = self.datamodule.val_dataset()
        if rows:
            sampler = self.services.current_sampler(self.policy_version)
            # Ranks split the rows unless the sampler runs the sharded policy (its forwards are collectives).
            if sampler is not self.services.sampler or not is_sharded(self.module.policy):
                rows = validation_share(rows, self.global_rank, self.world_size)
            for name, value in validate_rows(self.module, sampler, rows, self.services.envs).items():
                self.log(name, value)
            if self.module.supervised:
                self.log("val/loss", self.module.validation_loss(rows))
        call_hook(self, "on_validation_end")

    # -------------------------------------------------------------------------------------- bookkeeping
    def _write_manifest(self) -> Path:
        config, path = self.run_config, self.log_dir / "run.json"
        ranks = self.distributed.manifest_extra()  # a collective: every rank reports its host
        if not self.is_global_zero:
            return path
        write_manifest(path, config, self.seed, self.stage, **ranks)
        for logger in self.loggers:
            logger.log_hyperparams(config or {"seed": self.seed, "max_steps": self.max_steps})
        return path

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
        from rlforge.trainer.adapters import train_step

        loss = train_step(self, inputs, targets)
        self.metrics.discard()  # train_step is used outside fit: drop per-step logs
        return loss
