"""Data-parallel training across ranks and hosts: cluster detection, the process group, FSDP2 sharding."""

from rlforge.parallel.cluster import (
    ClusterEnvironment,
    SingleProcess,
    SLURMEnvironment,
    TorchElasticEnvironment,
    detect_cluster,
)
from rlforge.parallel.process_group import (
    DistributedError,
    all_gather_objects,
    all_reduce,
    barrier,
    broadcast_object,
    is_distributed,
    rank,
    world_size,
)

__all__ = [
    "ClusterEnvironment",
    "DistributedError",
    "SLURMEnvironment",
    "SingleProcess",
    "TorchElasticEnvironment",
    "all_gather_objects",
    "all_reduce",
    "barrier",
    "broadcast_object",
    "detect_cluster",
    "is_distributed",
    "rank",
    "world_size",
]
