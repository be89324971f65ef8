"""``RLModule``: what a user subclasses to supply the policy, the optimizer and the loss.

``PolicyModule`` adds the HF policy, tokenizer and AdamW plumbing. ``GRPOModule`` (``rlforge.grpo``) is the
default algorithm; ``SFTModule`` (``rlforge.sft``) is the supervised warm start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlforge.data.prompts import encode_chat_prompt
from rlforge.envs.base import Environment
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams
from rlforge.models import DEFAULT_POLICY, load_policy
from rlforge.models.loading import check_backend
from rlforge.models.peft import apply_peft, check_peft_config, trainable_parameters
from rlforge.optim import LRSchedulerCallable, OptimizerCallable, build_optimizers, check_optimizer_args
from rlforge.precision import check_precision
from rlforge.rollout import RolloutOptions
from rlforge.types import Group, TrainBatch

if TYPE_CHECKING:
    import rlforge


class RLModule(nn.Module):
    """Base class: holds the policy and its tokenizer and defines one update.

    Override ``configure_model`` (build ``self.policy``/``self.tokenizer``), ``configure_optimizers``,
    ``training_step`` and, for RL, ``score``/``compute_advantages``. Hooks with the names of
    ``Callback``'s (without the trainer/module arguments) are called after the callbacks'.
    """

    supervised = False
    """True for modules trained on fixed targets (``SFTModule``): no rollouts, no weight sync."""

    def __init__(self) -> None:
        super().__init__()
        self.trainer: rlforge.RLTrainer | None = None
        self.policy: nn.Module | None = None
        self.tokenizer: Any = None
        self.group_size: int = 1
        self.sampling = SamplingParams()
        self.val_sampling = SamplingParams(temperature=0.0)
        self.needs_reference = False
        # The policy's logprob forwards (training, reference, proximal) run the packed layers through torch.compile,
        # at this compute precision (rlforge.precision).
        self.compile_forward = False
        self.precision = "32-true"
        self.chat_template, self.system_prompt = False, None  # see encode_prompt
        self.environment: Environment | None = None  # set: rollouts are multi-turn episodes (rlforge.envs)

    # ----------------------------------------------------------------------------------- factories
    def configure_model(self) -> None:
        """Builds ``self.policy`` and ``self.tokenizer`` (called once, in setup)."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_model()")

    def configure_optimizers(self) -> torch.optim.Optimizer | dict[str, Any]:
        """Returns an optimizer, or ``{"optimizer": opt, "lr_scheduler": sched}`` (scheduler steps per RL step)."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers()")

    # ------------------------------------------------------------------------------------- the RL step
    @property
    def beta(self) -> float:
        """KL coefficient; the reference model is only run when it is > 0."""
        return 0.0

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt text -> token ids fed to the generator.

        With ``self.chat_template`` true (``GRPOModule(chat_template=True)``) the prompt becomes the user
        turn (after ``self.system_prompt``, if any) of the tokenizer's chat template, with the generation prompt.
        """
        if self.chat_template:
            return encode_chat_prompt(self.tokenizer, prompt, self.system_prompt)
        return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]

    def score(self, groups: list[Group]) -> dict[str, float]:
        """Fills ``episode.reward`` (and ``reward_breakdown``); returns reward metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement score()")

    def configure_rollout(self) -> RolloutOptions:
        """Data-side techniques the ``RolloutEngine`` applies (DAPO's dynamic sampling, overlong shaping/filter)."""
        return RolloutOptions()

    def compute_advantages(self, groups: list[Group]) -> None:
        """Fills ``episode.advantage`` for every episode."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_advantages()")

    def training_step(self, batch: TrainBatch) -> torch.Tensor:
        """Returns the loss of one minibatch."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step()")

    def split_for_accumulation(self, batch: Any) -> list[tuple[Any, float]]:
        """Micro-batches of one optimizer step and the weight of each loss (default: the whole batch)."""
        return [(batch, 1.0)]

    def loss_normalizer(self, batch: Any) -> tuple[torch.Tensor, str, int | None]:
        """``(mask, aggregation, max_len)``: the tokens ``training_step``'s loss is normalised over and how
        (``rlforge.losses.aggregation``). Data-parallel training weighs each rank's loss by its share of the
        global normaliser. Default: the batch's ``response_mask`` and ``self.loss``'s ``aggregation``/``max_len``
        (a loss without them: the mean over sequences)."""
        loss = getattr(self, "loss", None)
        return batch.response_mask, getattr(loss, "aggregation", "seq-mean-token-mean"), getattr(loss, "max_len", None)

    def is_correct(self, prompt: str, response: str, target: str) -> bool:
        """Correctness of one validation response (``val/accuracy``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement is_correct()")

    def log(self, name: str, value: float | torch.Tensor, weight: float = 1.0) -> None:
        """Records a metric for the current step (averaged if logged several times in a step, over micro-batches
        and ranks; ``weight`` is the value's weight in that average, e.g. the tokens a per-token mean covers)."""
        if self.trainer is None:
            raise RuntimeError("RLModule.log() called before the module was attached to a trainer")
        self.trainer.log(name, value, weight=weight)

    # ----------------------------------------------------------------------------------- hooks (no-op)
    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_rollout_start(self) -> None: ...
    def on_rollout_end(self, groups: list[Group]) -> None: ...
    def on_train_batch_start(self, batch: TrainBatch, batch_idx: int) -> None: ...
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_train_batch_end(self, outputs: dict[str, Any], batch: TrainBatch, batch_idx: int) -> None: ...
    def on_weight_sync_start(self) -> None: ...
    def on_weight_sync_end(self) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_train_step_end(self, metrics: dict[str, float]) -> None: ...
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_exception(self, exception: BaseException) -> None: ...


class PolicyModule(RLModule):
    """An ``RLModule`` whose policy is an HF causal LM loaded by name, trained with AdamW and linear warm-up.

    The shared base of ``GRPOModule`` and ``SFTModule``; subclass it to keep that plumbing and write only
    the algorithm. ``optimizer``/``lr_scheduler`` replace AdamW(``lr``, ``weight_decay``) and the warm-up.
    ``precision`` is the compute precision of the policy's forwards (``rlforge.precision``): ``32-true``, or
    ``bf16-mixed`` (parameters and optimizer state stay in ``dtype``, the forward runs under bf16 autocast).
    """

    def __init__(
        self,
        model: str = DEFAULT_POLICY,
        dtype: str = "float32",
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        chat_template: bool = False,
        system_prompt: str | None = None,
        backend: str = "hf",
        backend_options: dict[str, Any] | None = None,
        peft: Any = None,
        *,
        optimizer: OptimizerCallable | None = None,
        lr_scheduler: LRSchedulerCallable | None = None,
        precision: str = "32-true",
    ) -> None:
        super().__init__()
        self.precision = check_precision(precision)
        check_optimizer_args(type(self), lr, weight_decay, warmup_steps, optimizer, lr_scheduler)
        self.peft = check_peft_config(peft, backend)
        if system_prompt is not None and not chat_template:
            raise ConfigError("module.system_prompt needs `module.chat_template true` (it is a chat template turn)")
        check_backend(backend, backend_options)
        self.model_name, self.dtype = model, dtype
        self.backend, self.backend_options = backend, dict(backend_options or {})
        self.lr, self.weight_decay, self.warmup_steps = lr, weight_decay, warmup_steps
        self.optimizer_factory, self.lr_scheduler_factory = optimizer, lr_scheduler
        self.chat_template, self.system_prompt = chat_template, system_prompt

    def configure_model(self) -> None:
        if self.policy is None:
            # The titan backend builds its parameters directly on the training device.
            device = self.trainer.strategy.root_device if self.backend == "titan" and self.trainer else "cpu"
            self.policy, self.tokenizer = load_policy(
                self.model_name, self.dtype, device, backend=self.backend, backend_options=self.backend_options
            )
            if self.peft is not None:  # adapters (rlforge/models/peft.py): base frozen, only they train
                self.policy = apply_peft(self.policy, self.peft)
                if self.trainer is not None:
                    trainable, total = trainable_parameters(self.policy)
                    self.log("model/trainable_params", trainable)
                    self.log("model/trainable_pct", 100.0 * trainable / max(total, 1))

    def configure_optimizers(self) -> dict[str, Any]:
        return build_optimizers(
            [p for p in self.policy.parameters() if p.requires_grad],  # frozen base weights stay out (LoRA)
            self.lr,
            self.weight_decay,
            self.warmup_steps,
            self.optimizer_factory,
            self.lr_scheduler_factory,
        )


def __getattr__(name: str) -> Any:
    # ``rlforge.module.GRPOModule`` predates rlforge/grpo.py; keep the old import path working.
    if name == "GRPOModule":
        from rlforge.grpo import GRPOModule

        return GRPOModule
    raise AttributeError(f"module 'rlforge.module' has no attribute {name!r}")
