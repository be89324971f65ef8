"""The trainer's side of a data-parallel run: joining the process group, one run folder, rank-zero duties.

Every rank runs the same loop on its share of each step's groups (``RolloutEngine``); only rank 0 writes the
run folder, the manifest, loggers and checkpoint files. See docs/DESIGN.md, "Several ranks".
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from lightning_utilities.core.rank_zero import rank_zero_only

from rlforge.errors import ConfigError
from rlforge.parallel import all_gather_objects
from rlforge.parallel.cluster import ClusterEnvironment, detect_cluster
from rlforge.parallel.fsdp import data_parallel_coords
from rlforge.parallel.process_group import destroy_process_group, init_process_group

if TYPE_CHECKING:
    import torch

SAMPLING_SEEDS = ("auto", "stream", "group")


def check_sampling_seeds(value: str) -> None:
    """Raises ``ConfigError`` unless ``value`` is one of ``SAMPLING_SEEDS``."""
    if value not in SAMPLING_SEEDS:
        raise ConfigError(f"trainer.sampling_seeds must be one of {', '.join(SAMPLING_SEEDS)}, got {value!r}")


def validation_share(rows: list[Any], rank: int, world_size: int) -> list[Any]:
    """Rank ``rank``'s validation rows (every ``world_size``-th); all of them when there are fewer rows than ranks.

    Accuracy and pass@k are sums over prompts synced by torchmetrics, so a rank that sees every row counts them
    ``world_size`` times in numerator and denominator alike: the same scores.
    """
    return rows[rank::world_size] if len(rows) >= world_size else rows


class DistributedRun:
    """This process's place in the run, and the process group it started.

    Args:
        device: Device of the trainable policy (``nccl`` for CUDA, ``gloo`` on CPU).
        timeout_s: Rendezvous and collective timeout.
    """

    def __init__(self, device: torch.device, timeout_s: float) -> None:
        self.cluster: ClusterEnvironment = detect_cluster()
        self._owns_group = init_process_group(self.cluster, device, timeout_s)
        self.active = True
        rank_zero_only.rank = self.cluster.rank  # progress bars and rank_zero_only prints follow the run
        # Data-parallel coordinates: every rank, until a tensor-parallel policy groups ranks (bind_policy).
        self.dp_rank, self.dp_size = self.cluster.rank, self.cluster.world_size

    @property
    def rank(self) -> int:
        return self.cluster.rank

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    def bind_policy(self, policy: Any) -> None:
        """Takes the data-parallel coordinates from ``policy``: the ranks of a tensor-parallel group are one
        replica and train on the same groups (``rlforge.parallel.fsdp.data_parallel_coords``)."""
        self.dp_rank, self.dp_size = data_parallel_coords(policy, self.rank, self.world_size)

    def group_seeds(self, sampling_seeds: str) -> bool:
        """Whether groups sample from their own seeds (``auto``: with more than one rank)."""
        return sampling_seeds == "group" or (sampling_seeds == "auto" and self.world_size > 1)

    def manifest_extra(self) -> dict[str, Any]:
        """What run.json records about the ranks: world size, launcher and each rank's host."""
        hosts = all_gather_objects(socket.gethostname())
        return {"world_size": self.world_size, "launcher": self.cluster.name, "hosts": sorted(set(hosts))}

    def close(self) -> None:
        """Leaves the process group this run started."""
        if self._owns_group:
            destroy_process_group()
            self._owns_group = False
        self.active = False
