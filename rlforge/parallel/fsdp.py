"""FSDP2 for the ``hf`` backend: shard a policy over the ranks, and gather it back at the edges.

``fully_shard`` is applied to every decoder layer, then to the root, as torchtitan does: each layer's parameters
are all-gathered just before its forward/backward and its gradients reduce-scattered (averaged) right after.
Outside the training step rlforge speaks full HF state dicts, so generator syncs and checkpoints gather
(``torch.distributed.checkpoint.state_dict``) and restores scatter.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlforge.errors import CheckpointError, ConfigError


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are DTensors (FSDP2 or torchtitan's parallelize)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def needs_gather(model: nn.Module) -> bool:
    """Whether ``model`` is sharded by ``shard_policy`` and its ``state_dict`` holds shards: rlforge gathers it.

    A policy with its own HF edge (``to_hf_model``: the titan backend) gathers in its own ``state_dict`` and writes
    only on rank 0 in ``save_pretrained``.
    """
    return is_sharded(model) and not callable(getattr(model, "to_hf_model", None))


def data_parallel_coords(model: nn.Module, rank: int, world_size: int) -> tuple[int, int]:
    """This rank's ``(index, count)`` among the data-parallel replicas of ``model``.

    Every rank is one replica, except under tensor parallelism (the titan backend's ``parallel_dims.tp > 1``):
    the ranks of one TP group hold the same batch, so they are one replica (torchtitan's ``batch`` mesh).
    """
    dims = getattr(model, "parallel_dims", None)
    if dims is None or dims.tp <= 1:
        return rank, world_size
    mesh = dims.get_optional_mesh("batch")  # None when the data-parallel degree is 1
    return (mesh.get_local_rank(), mesh.size()) if mesh is not None else (0, 1)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of an HF causal LM (``model.model.layers`` and its kin)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        node: Any = model
        for part in path.split("."):
            node = getattr(node, part, None)
        if isinstance(node, nn.ModuleList) and len(node):
            return list(node)
    return []


def shard_policy(model: nn.Module, device: torch.device) -> nn.Module:
    """Applies FSDP2 (``fully_shard``) per decoder layer and to the root, over all ranks; returns ``model``.

    Raises:
        ConfigError: The model has no decoder-layer list rlforge knows (it would be one unit: no memory saved).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    layers = decoder_layers(model)
    if not layers:
        raise ConfigError(
            f"data-parallel training shards the policy per decoder layer, but {type(model).__name__} has no "
            "model.layers / transformer.h list; use a standard HF causal LM or the titan backend"
        )
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    # The root too reshards after its forward: a forward without backward (validation sampling, a no-grad
    # logprob pass) would otherwise leave unsharded parameters registered, which the optimizer does not hold.
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model


def full_state_dict(model: nn.Module, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict of a sharded ``model``, on every rank or (``rank0_only``) on rank 0 in CPU
    memory (other ranks get ``{}``). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    return get_model_state_dict(model, options=options)


def load_full_state_dict(model: nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    """Loads full HF ``weights`` (every rank holds them) into a sharded ``model``; tied names may be absent."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    result = set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
    tied = tied_names(model)
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{where}: weights do not match the policy (missing {missing[:5]}, unexpected {result.unexpected_keys[:5]})"
        )


def tied_names(model: nn.Module) -> set[str]:
    """Parameter names that are another parameter (tied embeddings); ``save_pretrained`` stores them once."""
    named = {name for name, _ in model.named_parameters()}
    everything = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return everything - named


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The full optimizer state keyed by parameter name (rank 0; ``{}`` elsewhere). A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Loads a saved optimizer state, keyed by parameter name or (one-process checkpoints) by index.

    Sharded models take the name-keyed full state through ``set_optimizer_state_dict`` (every rank holds it);
    a one-process model gets it converted to indices in its optimizer's parameter order.
    """
    keys = list(state.get("state", {}))
    by_name = (bool(keys) and isinstance(keys[0], str)) or _groups_by_name(state)
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        named = state if by_name else _indices_to_names(state, model, optimizer)
        set_optimizer_state_dict(model, optimizer, named, options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(_names_to_indices(state, model, optimizer) if by_name else state)


def _groups_by_name(state: dict[str, Any]) -> bool:
    groups = state.get("param_groups", [])
    return bool(groups and groups[0].get("params") and isinstance(groups[0]["params"][0], str))


def _param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Name of each optimizer parameter, in the optimizer's order (its index in a one-process state dict)."""
    names = {id(p): n for n, p in model.named_parameters()}
    try:
        return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    except KeyError:
        raise CheckpointError(
            "the optimizer holds parameters that are not the policy's: cannot map its state"
        ) from None


def _names_to_indices(state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    index = {name: i for i, name in enumerate(_param_names(model, optimizer))}
    return {
        "state": {index[k]: v for k, v in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]],
    }


def _indices_to_names(state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    names = _param_names(model, optimizer)
    return {
        "state": {names[int(k)]: v for k, v in state["state"].items()},
        "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]],
    }
