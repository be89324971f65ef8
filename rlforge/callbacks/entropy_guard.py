"""``EntropyCollapseGuard``: acts when the policy's token entropy stays below a floor (policy collapse)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlforge.callbacks._report import announce, require_settable_beta
from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge
    from rlforge.types import TrainBatch

ACTIONS = ("raise_entropy_coef", "raise_beta", "stop")


class EntropyCollapseGuard(Callback):
    """Watches ``train/entropy`` (mean token entropy of the policy, logged by the module) every step.

    After ``patience`` steps in a row below ``min_entropy`` it acts and starts counting again:
    ``raise_entropy_coef`` multiplies the module's entropy bonus by ``factor`` (from ``initial_value``
    when it is 0), ``raise_beta`` does the same to the KL coefficient (pulling the policy back towards
    the reference), ``stop`` ends the run. Each action logs ``guard/entropy_collapse`` = 1 at that step
    and one line on stderr; ``train/entropy_coef`` (or ``train/beta``) logs the value each step used.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: rlforge.EntropyCollapseGuard
              init_args: {min_entropy: 0.3, patience: 5, action: raise_entropy_coef}

    Args:
        min_entropy: Entropy floor (nats per token).
        patience: Consecutive steps below the floor before acting.
        action: ``raise_entropy_coef``, ``raise_beta`` or ``stop``.
        factor: Multiplier applied to the coefficient by each action.
        initial_value: Coefficient set by the first action when it is 0.
        max_value: Ceiling of the raised coefficient (``None``: none).
    """

    def __init__(
        self,
        min_entropy: float,
        patience: int = 3,
        action: str = "raise_entropy_coef",
        factor: float = 2.0,
        initial_value: float = 0.01,
        max_value: float | None = None,
    ) -> None:
        if action not in ACTIONS:
            raise ConfigError(f"EntropyCollapseGuard.action must be one of {list(ACTIONS)}, got {action!r}")
        if patience < 1:
            raise ConfigError(f"EntropyCollapseGuard.patience must be >= 1, got {patience}")
        if factor <= 1.0 or initial_value <= 0:
            raise ConfigError("EntropyCollapseGuard.factor must be > 1 and initial_value > 0")
        self.min_entropy, self.patience, self.action = min_entropy, patience, action
        self.factor, self.initial_value, self.max_value = factor, initial_value, max_value
        self.steps_below = 0
        self.actions_taken = 0

    @property
    def state_key(self) -> str:
        return f"EntropyCollapseGuard{{action={self.action}, min_entropy={self.min_entropy}}}"

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        if stage != "fit":
            return
        if self.action == "raise_beta":
            require_settable_beta(module, "EntropyCollapseGuard(action='raise_beta')")
            module.needs_reference = True  # beta may start at 0: the reference model must exist
        if self.action == "raise_entropy_coef" and not hasattr(module, "entropy_coef"):
            raise ConfigError(
                f"EntropyCollapseGuard(action='raise_entropy_coef') needs module.entropy_coef; "
                f"{type(module).__name__} has none (use action raise_beta or stop)"
            )

    def on_train_batch_start(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, batch: TrainBatch, batch_idx: int
    ) -> None:
        if self.action == "raise_entropy_coef":
            module.log("train/entropy_coef", module.entropy_coef)
        elif self.action == "raise_beta":
            module.log("train/beta", module.beta)

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        entropy = metrics.get("train/entropy")
        if entropy is None:
            raise ConfigError(
                f"EntropyCollapseGuard: step {trainer.global_step} logged no train/entropy; "
                "the module's training_step must log it (GRPOModule does)"
            )
        self.steps_below = self.steps_below + 1 if entropy < self.min_entropy else 0
        if self.steps_below < self.patience:
            return
        self.steps_below = 0
        self.actions_taken += 1
        what = f"train/entropy={entropy:.4g} < {self.min_entropy} for {self.patience} steps"
        if self.action == "stop":
            trainer.should_stop = True
            done = "stopping the run"
        elif self.action == "raise_entropy_coef":
            module.entropy_coef = self._raised(module.entropy_coef)
            done = f"entropy_coef -> {module.entropy_coef:.4g}"
        else:
            module.beta = self._raised(module.beta)
            done = f"beta -> {module.beta:.4g}"
        trainer.log("guard/entropy_collapse", 1.0)
        announce(f"rlforge: EntropyCollapseGuard: step {trainer.global_step} {what}; {done}")

    def _raised(self, value: float) -> float:
        raised = value * self.factor if value > 0 else self.initial_value
        return min(raised, self.max_value) if self.max_value is not None else raised

    def state_dict(self) -> dict[str, Any]:
        return {"steps_below": self.steps_below, "actions_taken": self.actions_taken}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps_below = int(state_dict["steps_below"])
        self.actions_taken = int(state_dict["actions_taken"])
