"""Per-role placement of the Monarch services (the seed's ``services:`` block)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlforge.errors import ConfigError


@dataclass
class ServiceConfig:
    """Where and how many workers of one role run.

    Args:
        procs: Processes per replica (one proc mesh of ``procs`` processes each).
        num_replicas: Independent copies of the role (0 disables the role's actors where that is allowed).
        with_gpus: Place each process on its own GPU (the proc mesh dimension is ``gpus``); needs CUDA.
        hosts: Name of the host mesh of the Monarch job (``trainer.strategy.job``) to run on; ``null``: this host.
        backend: What the generator replicas run: ``torch`` (``TorchGenerator``) or ``vllm`` (``VLLMGenerator``,
            needs the ``vllm`` extra); the same words as ``LocalStrategy(generator=...)``. Generator role only.
        options: Keyword arguments of the generator class (vLLM's ``gpu_memory_utilization``, ``dtype``, ...).
    """

    procs: int = 1
    num_replicas: int = 1
    with_gpus: bool = False
    hosts: str | None = None
    backend: str = "torch"
    options: dict[str, Any] = field(default_factory=dict)

    def check(self, role: str, allow_zero: bool = False) -> None:
        if self.procs < 1:
            raise ConfigError(f"trainer.strategy.{role}.procs must be >= 1, got {self.procs}")
        if self.num_replicas < (0 if allow_zero else 1):
            low = 0 if allow_zero else 1
            raise ConfigError(f"trainer.strategy.{role}.num_replicas must be >= {low}, got {self.num_replicas}")
        if role != "generator" and (self.backend != "torch" or self.options):
            raise ConfigError(f"trainer.strategy.{role}: backend and options apply to the generator only")

    @property
    def per_host(self) -> dict[str, int]:
        return {"gpus" if self.with_gpus else "procs": self.procs}
