"""``Strategy``: WHERE the generator, reference model and reward workers run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch

from rlforge.errors import ConfigError
from rlforge.services.bundle import Staleness

if TYPE_CHECKING:
    import rlforge
    from rlforge.services import RunContext, Services


def resolve_device(device: str) -> torch.device:
    """``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``, checked against this machine."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"trainer.strategy.device is {device!r} but CUDA is not available")
    return torch.device(device)


def check_device(device: str) -> None:
    """Raises ``ConfigError`` unless ``device`` is ``auto``, ``cpu`` or ``cuda[:N]`` (checked at construction)."""
    if device != "auto" and not (device == "cpu" or device.startswith("cuda")):
        raise ConfigError(f"trainer.strategy.device must be auto, cpu or cuda[:N], got {device!r}")


class Strategy(ABC):
    """Places the policy and builds the rollout-side services.

    The trainer calls ``build`` once per run and afterwards only talks to the returned ``Services``
    (``rlforge.services``); it never imports monarch or vllm. A strategy never sees the trainer: what it needs to
    know about the run comes in the ``RunContext``.

    Args:
        device: Device of the trainable policy: ``auto``, ``cpu`` or ``cuda[:N]``.
    """

    staleness: Staleness = Staleness()
    """Async-rollout settings the strategy hands the ``RolloutEngine`` (strategies that take ``max_staleness``)."""

    def __init__(self, device: str = "auto") -> None:
        check_device(device)
        self.device = device

    @property
    def root_device(self) -> torch.device:
        """Device of the trainable policy."""
        return resolve_device(self.device)

    @abstractmethod
    def build(self, ctx: RunContext, module: rlforge.RLModule) -> Services:
        """Moves the policy to ``root_device`` and starts the services ``ctx.stage`` needs.

        For ``fit`` of an RL module: a generator holding a copy of the current weights (version 0), the reference
        model when ``module.beta > 0`` or ``module.needs_reference``, reward workers where configured.
        """

    def place(self, ctx: RunContext, module: rlforge.RLModule) -> tuple[Services, bool]:
        """The start of every ``build``: moves the policy to ``root_device`` and returns the services every stage
        has (a sampler of the current weights, for validation; the module's environments, in threads) and whether
        ``ctx.stage`` needs rollout services."""
        from rlforge.envs import LocalEnvRunner
        from rlforge.generation.factory import PolicySampler
        from rlforge.services import Services

        policy = module.policy.to(self.root_device)
        sampler = PolicySampler(policy, module.tokenizer, seed=ctx.seed + 1)
        services = Services(sampler=sampler, staleness=self.staleness)
        if module.environment is not None:  # validation runs episodes too; Monarch may replace it with env actors
            services.envs = LocalEnvRunner(module.environment)
        return services, ctx.stage == "fit" and not module.supervised

    def parallelize(self, ctx: RunContext, module: rlforge.RLModule) -> None:
        """Shards the policy over the ``ctx.world_size`` ranks of a data-parallel fit (called after ``build``, so
        generators and the reference model copied full weights). FSDP2 per decoder layer for an HF policy; a
        policy that is sharded already (the titan backend's parallelize) is left as it is.

        Raises:
            ConfigError: The policy cannot be trained data-parallel here (a PEFT policy).
        """
        from rlforge.models.peft import is_peft_model
        from rlforge.parallel.fsdp import is_sharded, shard_policy

        if is_sharded(module.policy):
            return
        if is_peft_model(module.policy):
            raise ConfigError(
                f"a LoRA (PEFT) policy trains on one process; this run has {ctx.world_size} ranks (launch it "
                "without torchrun/srun, or train the full model)"
            )
        shard_policy(module.policy, self.root_device)

    def teardown(self) -> None:
        """Stops workers and releases memory (idempotent)."""
