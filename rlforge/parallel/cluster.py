"""Cluster environments: who launched this process, and what its rank, world size and rendezvous are.

One class per launcher, in the manner of Lightning's ``ClusterEnvironment`` plugins. ``detect()`` picks the first
that recognises the process environment: torchrun (``torch.distributed.elastic``), then SLURM (``srun``), else a
single process. Nothing here starts a process group; ``rlforge.parallel.process_group`` does.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
from abc import ABC, abstractmethod

from rlforge.errors import ConfigError

DEFAULT_PORT = 29500


class ClusterEnvironment(ABC):
    """Where this process sits in a multi-process run."""

    name: str = ""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether the process environment was set up by this launcher."""

    @property
    @abstractmethod
    def rank(self) -> int:
        """Global rank, ``0 .. world_size - 1``."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """Number of processes of the run."""

    @property
    def local_rank(self) -> int:
        """Rank on this host (selects the GPU)."""
        return 0

    @property
    def main_address(self) -> str:
        """Host of rank 0's rendezvous store."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        """Port of rank 0's rendezvous store."""
        return _int_env("MASTER_PORT", DEFAULT_PORT)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank})"


class SingleProcess(ClusterEnvironment):
    """A plain ``python``/``rlforge`` process: rank 0 of 1."""

    name = "single"

    @staticmethod
    def detect() -> bool:
        return True

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1


class TorchElasticEnvironment(ClusterEnvironment):
    """``torchrun``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``."""

    name = "torchrun"

    @staticmethod
    def detect() -> bool:
        return "TORCHELASTIC_RUN_ID" in os.environ or all(v in os.environ for v in ("RANK", "WORLD_SIZE"))

    @property
    def rank(self) -> int:
        return _int_env("RANK", 0)

    @property
    def world_size(self) -> int:
        return _int_env("WORLD_SIZE", 1)

    @property
    def local_rank(self) -> int:
        return _int_env("LOCAL_RANK", 0)


class SLURMEnvironment(ClusterEnvironment):
    """``srun`` inside an allocation: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_JOB_NODELIST``.

    Only a job *step* counts (``SLURM_STEP_ID`` set by ``srun``): an ``sbatch`` script running ``rlforge fit``
    itself is one process, not task 0 of ``--ntasks``. Rank 0's host is the first of the node list unless
    ``MASTER_ADDR`` says otherwise; the port is ``MASTER_PORT``, else derived from the job id (so two jobs on a
    node do not collide).
    """

    name = "slurm"

    @staticmethod
    def detect() -> bool:
        env = os.environ
        return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and env.get("SLURM_STEP_ID") not in ("batch", "extern")

    @property
    def rank(self) -> int:
        return _int_env("SLURM_PROCID", 0)

    @property
    def world_size(self) -> int:
        return _int_env("SLURM_STEP_NUM_TASKS", _int_env("SLURM_NTASKS", 1))

    @property
    def local_rank(self) -> int:
        return _int_env("SLURM_LOCALID", 0)

    @property
    def main_address(self) -> str:
        if "MASTER_ADDR" in os.environ:
            return os.environ["MASTER_ADDR"]
        nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "")
        return first_host(nodes) if nodes else "127.0.0.1"

    @property
    def main_port(self) -> int:
        if "MASTER_PORT" in os.environ:
            return _int_env("MASTER_PORT", DEFAULT_PORT)
        job = os.environ.get("SLURM_JOB_ID", "0")
        return 15000 + int(hashlib.sha1(job.encode()).hexdigest(), 16) % 20000


ENVIRONMENTS: tuple[type[ClusterEnvironment], ...] = (TorchElasticEnvironment, SLURMEnvironment, SingleProcess)


def detect_cluster() -> ClusterEnvironment:
    """The environment of the launcher that started this process (``SingleProcess`` when none did)."""
    for kind in ENVIRONMENTS:
        if kind.detect():
            env = kind()
            if not 0 <= env.rank < env.world_size:
                raise ConfigError(f"{kind.name}: rank {env.rank} is not in 0..{env.world_size - 1}; check the launcher")
            return env
    return SingleProcess()


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist (``node[03-05,07],gpu1`` -> ``node03``).

    ``scontrol show hostnames`` when it is installed, else the common ``prefix[a-b,c]`` form parsed here.
    """
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10, check=True
            ).stdout.split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if head is None:
        return socket.gethostname()
    prefix, ranges = head.group(1), head.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None
