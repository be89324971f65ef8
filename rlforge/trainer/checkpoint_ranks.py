"""Checkpoints of a data-parallel run: written once by rank 0, with every rank's RNG and sampler state.

The policy is gathered into one HF folder (it loads with ``from_pretrained``, like a one-process checkpoint) and
the optimizer state is saved keyed by parameter name, so a checkpoint resumes exactly on the same world size and
restores weights, optimizer and data position on any other (one process included).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlforge.parallel import all_gather_objects
from rlforge.parallel.fsdp import full_state_dict, is_sharded, needs_gather, optimizer_state

if TYPE_CHECKING:
    import torch

    import rlforge

log = logging.getLogger("rlforge")


def gather_state(trainer: rlforge.RLTrainer, state: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    """Completes ``state`` for a multi-rank save (a collective: every rank calls it) and returns the gathered
    policy weights (on rank 0; ``None`` for a policy that gathers itself in ``save_pretrained``).

    Adds ``world_size`` and ``ranks`` (each rank's ``rng`` and ``strategy`` state, in rank order) and replaces
    ``optimizer`` by the full name-keyed optimizer state.
    """
    policy = trainer.module.policy
    ranks = all_gather_objects({"rng": state["rng"], "strategy": state["strategy"]})
    state["world_size"], state["ranks"] = len(ranks), ranks
    if trainer.optimizer is not None and is_sharded(policy):
        state["optimizer"] = optimizer_state(policy, trainer.optimizer)
    return full_state_dict(policy, rank0_only=True) if needs_gather(policy) else None


def save_policy(policy: torch.nn.Module, folder: Path, weights: dict[str, torch.Tensor] | None) -> None:
    """``policy.save_pretrained`` with the gathered ``weights`` (``None``: a policy that gathers itself).

    transformers names the architecture without FSDP2's ``FSDP`` class prefix, so config.json stays loadable."""
    extra = {} if weights is None else {"state_dict": weights}
    policy.save_pretrained(folder, safe_serialization=True, **extra)


def rank_state(state: dict[str, Any], rank: int, world_size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """This rank's ``(rng, strategy)`` state from a checkpoint written by any number of ranks.

    Same world size: its own (exact resume). Otherwise (one line says so) rank ``r`` takes saved rank
    ``r % n``'s streams, without rows that were in flight on that rank: weights, optimizer, progress and data
    position are restored, sampling continues from other streams.
    """
    ranks = state.get("ranks")
    saved = len(ranks) if ranks else 1
    if saved == world_size:
        return (ranks[rank]["rng"], ranks[rank]["strategy"]) if ranks else (state["rng"], state["strategy"])
    if rank == 0:
        log.warning(
            f"rlforge: warning: checkpoint written by {saved} rank(s), resumed on {world_size}: weights, optimizer "
            "and data position are restored; sampler streams continue from other ranks' states"
        )
    own = ranks[rank % saved] if ranks else {"rng": state["rng"], "strategy": state["strategy"]}
    strategy = {k: v for k, v in own["strategy"].items() if k != "pending_rows"}
    return own["rng"], strategy
