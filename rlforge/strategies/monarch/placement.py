"""Where each service runs: host meshes of this host or of a Monarch job, and worker devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlforge.errors import ConfigError
from rlforge.strategies.monarch.config import ServiceConfig


def load_job(job: Any) -> Any:
    """The ``JobState`` (named host meshes) of ``job``: a dumped job's path or a ``monarch.job`` ``JobTrait``."""
    if job is None:
        return None
    if isinstance(job, (str, Path)):
        from monarch.job import job_load

        if not Path(job).is_file():
            raise ConfigError(f"trainer.strategy.job: no dumped Monarch job at {job!r}")
        job = job_load(str(job))
    return job.state(cached_path=None)


def host_mesh(job_state: Any, cfg: ServiceConfig, index: int) -> Any:
    """The host mesh replica ``index`` of a service runs on: this host, or host ``index mod n`` of ``cfg.hosts``."""
    from monarch.actor import this_host

    if cfg.hosts is None:
        return this_host()
    if job_state is None:
        raise ConfigError(f"trainer.strategy: a service asks for hosts {cfg.hosts!r} but trainer.strategy.job is null")
    try:
        hosts = getattr(job_state, cfg.hosts)
    except AttributeError as err:
        raise ConfigError(f"trainer.strategy: the Monarch job has no host mesh named {cfg.hosts!r}") from err
    return hosts.slice(hosts=index % hosts.size("hosts"))


def worker_device(cfg: ServiceConfig, index: int) -> str:
    """``cpu``, or ``cuda:<index mod visible GPUs>`` with ``with_gpus``."""
    if not cfg.with_gpus:
        return "cpu"
    if not torch.cuda.is_available():
        raise ConfigError("trainer.strategy: with_gpus is true but CUDA is not available on this host")
    return f"cuda:{index % torch.cuda.device_count()}"
