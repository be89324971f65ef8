"""``KLMonitor``: logs the KL to the reference policy, adapts beta towards a target, guards a ceiling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlforge.callbacks._report import announce, require_settable_beta
from rlforge.callbacks.callback import Callback
from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge
    from rlforge.types import TrainBatch


class KLMonitor(Callback):
    """Measures ``train/kl`` every step (the reference model runs even at ``beta = 0``) and acts on it.

    With ``target`` it is the adaptive KL controller of Ziegler et al. (2019), as in TRL/OpenRLHF: after a
    step with KL ``kl`` over ``n`` episodes, ``beta <- beta * (1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon)``.
    ``train/beta`` logs the coefficient each step's loss used. Over ``max_kl`` it logs
    ``guard/kl_exceeded`` and warns, or stops the run (``on_max_kl="stop"``).

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: rlforge.KLMonitor
              init_args: {target: 0.05, horizon: 1000, max_kl: 1.0, on_max_kl: stop}

    Args:
        target: KL the controller steers to (``None``: no adaptation, only monitoring).
        horizon: Episodes over which the controller closes the gap (larger is slower).
        init_beta: Starting beta (``None`` keeps the loss's own; the controller needs it > 0).
        max_kl: KL above which ``on_max_kl`` happens (``None`` disables).
        on_max_kl: ``warn`` or ``stop``.
    """

    def __init__(
        self,
        target: float | None = None,
        horizon: int = 10000,
        init_beta: float | None = None,
        max_kl: float | None = None,
        on_max_kl: str = "warn",
    ) -> None:
        if target is not None and target <= 0:
            raise ConfigError(f"KLMonitor.target must be > 0 or null, got {target}")
        if horizon < 1:
            raise ConfigError(f"KLMonitor.horizon must be >= 1, got {horizon}")
        if on_max_kl not in ("warn", "stop"):
            raise ConfigError(f"KLMonitor.on_max_kl must be 'warn' or 'stop', got {on_max_kl!r}")
        self.target, self.horizon, self.init_beta = target, horizon, init_beta
        self.max_kl, self.on_max_kl = max_kl, on_max_kl
        self.exceeded = 0  # steps over max_kl
        self._samples_seen = 0

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, stage: str) -> None:
        if stage != "fit":
            return
        module.needs_reference = True  # measure KL even at beta = 0; let beta start from 0 later
        if self.init_beta is not None or self.target is not None:
            require_settable_beta(module, "KLMonitor")
        if self.init_beta is not None:
            module.beta = self.init_beta
        if self.target is not None and module.beta <= 0:
            raise ConfigError(
                "KLMonitor(target=...) scales beta, which is 0: set KLMonitor.init_beta or the loss's beta > 0"
            )

    def on_train_start(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self._samples_seen = trainer.progress.samples

    def on_train_batch_start(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, batch: TrainBatch, batch_idx: int
    ) -> None:
        module.log("train/beta", module.beta)

    def on_train_step_end(
        self, trainer: rlforge.RLTrainer, module: rlforge.RLModule, metrics: dict[str, float]
    ) -> None:
        samples, self._samples_seen = trainer.progress.samples - self._samples_seen, trainer.progress.samples
        kl = metrics.get("train/kl")
        if kl is None:
            raise ConfigError(
                f"KLMonitor: step {trainer.global_step} logged no train/kl; the loss must record last_metrics['kl'] "
                "(every rlforge PolicyLoss does when it gets ref_logprobs)"
            )
        if self.target is not None:
            error = min(max(kl / self.target - 1.0, -0.2), 0.2)
            module.beta = module.beta * (1.0 + error * samples / self.horizon)
        if self.max_kl is not None and kl > self.max_kl:
            self.exceeded += 1
            trainer.log("guard/kl_exceeded", 1.0)
            stop = self.on_max_kl == "stop"
            trainer.should_stop = trainer.should_stop or stop
            announce(
                f"rlforge: KLMonitor: step {trainer.global_step} train/kl={kl:.4g} > max_kl={self.max_kl}"
                + ("; stopping the run" if stop else "")
            )

    def state_dict(self) -> dict[str, Any]:
        return {"exceeded": self.exceeded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.exceeded = int(state_dict["exceeded"])
