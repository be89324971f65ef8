"""Starting, using and stopping ``torch.distributed`` for a data-parallel run, with timeouts everywhere.

A rendezvous that never completes or a collective a dead rank never joins raises a one-line
``DistributedError`` naming the cause instead of hanging. Object collectives carry small plain state
(metric names, RNG states, paths) between the run's own processes.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from rlforge.errors import RLForgeError
from rlforge.parallel.cluster import ClusterEnvironment

DEFAULT_TIMEOUT_S = 300.0


class DistributedError(RLForgeError, RuntimeError):
    """A distributed run cannot go on (no rendezvous, a rank died, a collective timed out)."""


def is_distributed() -> bool:
    """Whether a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's global rank (0 alone)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of ranks (1 alone)."""
    return dist.get_world_size() if is_distributed() else 1


def backend_for(device: torch.device) -> str:
    """``nccl`` for CUDA policies, ``gloo`` on CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_process_group(cluster: ClusterEnvironment, device: torch.device, timeout_s: float) -> bool:
    """Joins the run's process group; returns whether this call started it (and so must destroy it).

    Raises:
        DistributedError: No rendezvous with rank 0 within ``timeout_s``.
    """
    if cluster.world_size <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":  # its own GPU: local_rank among all of the node's, or the one it sees
        torch.cuda.set_device(cluster.local_rank % max(torch.cuda.device_count(), 1))
    address, port = cluster.main_address, cluster.main_port
    # torch reads these for the rendezvous of sub-groups (DeviceMesh) and logs them; keep them in step.
    os.environ.setdefault("MASTER_ADDR", address)
    os.environ.setdefault("MASTER_PORT", str(port))
    try:
        dist.init_process_group(
            backend_for(device),
            init_method=f"tcp://{address}:{port}",
            rank=cluster.rank,
            world_size=cluster.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except Exception as err:  # noqa: BLE001 - DistStoreError, RuntimeError, OSError: one line about the rendezvous
        raise DistributedError(
            f"rank {cluster.rank} of {cluster.world_size} ({cluster.name}): no rendezvous with {address}:{port} within "
            f"{timeout_s:g} s ({_first_line(err)}); are all ranks started, and is MASTER_ADDR/MASTER_PORT right?"
        ) from None
    return True


def destroy_process_group() -> None:
    """Leaves the process group (idempotent)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _collective(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - gloo/nccl raise RuntimeError/DistBackendError subclasses
        raise DistributedError(
            f"rank {rank()} of {world_size()}: {what} failed ({_first_line(err)}); another rank probably died or "
            "stopped early: see its log"
        ) from None


def all_gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` alone)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    _collective("all_gather_object", dist.all_gather_object, out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    _collective("broadcast_object_list", dist.broadcast_object_list, box, src=src)
    return box[0]


def scatter_objects(items: list[Any] | None, src: int = 0) -> Any:
    """Item ``r`` of rank ``src``'s ``items`` on rank ``r`` (the others pass ``None``)."""
    if not is_distributed():
        return items[0]
    out: list[Any] = [None]
    _collective("scatter_object_list", dist.scatter_object_list, out, items if rank() == src else None, src=src)
    return out[0]


def run_on_rank_zero(fn: Any) -> Any:
    """``fn()`` run by rank 0 alone; its result, or the rlforge error it raised, on every rank."""
    if not is_distributed():
        return fn()
    result, error = None, None
    if rank() == 0:
        try:
            result = fn()
        except RLForgeError as err:
            error = err
    result, error = broadcast_object((result, error))
    if error is not None:
        raise error
    return result


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """``tensor`` reduced over ranks in place (``sum`` or ``max``); returned for chaining."""
    if is_distributed():
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
        _collective(f"all_reduce({op})", dist.all_reduce, tensor, op=reduce_op)
    return tensor


def barrier() -> None:
    """Waits for every rank."""
    if is_distributed():
        _collective("barrier", dist.barrier)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__
