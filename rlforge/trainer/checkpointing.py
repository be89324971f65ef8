"""Saving and restoring a full training state: policy (HF folder) + optimizer, RNG, data, callbacks.

``trainer_state.pt`` holds only tensors and plain Python values and is read with ``torch.load(weights_only=True)``,
so resuming never runs code from a checkpoint file.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlforge.checkpoint_files import verify_checkpoint, write_manifest
from rlforge.checkpoint_io import (
    POLICY_DIR,
    STATE_FILE,
    atomic_directory,
    capture_rng_state,
    restore_rng_state,
)
from rlforge.errors import CheckpointError
from rlforge.models.peft import is_adapter_folder, is_peft_model, load_adapter
from rlforge.parallel import barrier, broadcast_object
from rlforge.parallel.fsdp import load_full_state_dict, load_optimizer_state, needs_gather
from rlforge.trainer.call import call_hook
from rlforge.trainer.checkpoint_ranks import gather_state, rank_state, save_policy

if TYPE_CHECKING:
    import rlforge

__all__ = ["POLICY_DIR", "STATE_FILE", "build_state", "load_checkpoint", "restore", "save"]

FORMAT_VERSION = 2  # 2: RNG states as tensors and plain values (1 pickled NumPy arrays)
_LEAVES = (str, bytes, int, float, bool, complex, type(None), torch.Tensor, torch.Size, torch.device, torch.dtype)
log = logging.getLogger("rlforge")


def build_state(trainer: rlforge.RLTrainer) -> dict[str, Any]:
    """Everything but the policy weights, as one dict of tensors and plain values."""
    return {
        "format_version": FORMAT_VERSION,
        "progress": trainer.progress.state_dict(),
        "optimizer": trainer.optimizer.state_dict() if trainer.optimizer is not None else None,
        "lr_scheduler": trainer.lr_scheduler.state_dict() if trainer.lr_scheduler is not None else None,
        "rng": capture_rng_state(),
        "datamodule": trainer.datamodule.state_dict(),
        "strategy": trainer.rollout_state(),  # generator side (key kept from rlforge 0.1)
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "loggers": [logger.state_dict() for logger in trainer.loggers],
        "callback_metrics": dict(trainer.callback_metrics),
    }


def plain_state(obj: Any, where: str = "state") -> Any:
    """``obj`` with NumPy scalars made Python values; raises on anything ``weights_only`` loading would refuse.

    Checked when saving, so a ``state_dict`` that returns other objects fails at once, naming its key,
    instead of making a checkpoint nobody can resume.
    """
    kind = type(obj)
    if kind in (dict, OrderedDict, Counter):
        return kind({k: plain_state(v, f"{where}.{k}") for k, v in obj.items()})
    if kind in (list, tuple, set):
        return kind(plain_state(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if kind in _LEAVES or isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    raise CheckpointError(
        f"checkpoint {where} is a {kind.__module__}.{kind.__qualname__}; a state_dict may hold only tensors and "
        "plain Python values (dict, list, tuple, str, int, float, bool, None), so resuming never unpickles code"
    )


def save(trainer: rlforge.RLTrainer, path: Path) -> Path:
    """Writes ``path/policy`` (loads with ``AutoModelForCausalLM.from_pretrained``; for a PEFT policy, the adapter
    folder ``peft.PeftModel.from_pretrained(base, path/policy)`` loads), ``path/trainer_state.pt`` and, last,
    ``path/manifest.json``; everything is fsynced before the folder is renamed into place.

    With several ranks every rank calls it (the policy and optimizer are gathered) and rank 0 alone writes.
    """
    state = build_state(trainer)
    call_hook(trainer, "on_save_checkpoint", state)
    state = plain_state(state)
    module, weights = trainer.module, None
    if trainer.world_size > 1:
        weights = gather_state(trainer, state)
        if not trainer.is_global_zero:
            if weights is None:  # a policy that gathers in save_pretrained (titan): a collective, rank 0 writes
                module.policy.save_pretrained(path / POLICY_DIR, safe_serialization=True)
            barrier()
            return path
    with atomic_directory(path) as tmp:
        save_policy(module.policy, tmp / POLICY_DIR, weights)
        if module.tokenizer is not None:
            module.tokenizer.save_pretrained(tmp / POLICY_DIR)
        torch.save(state, tmp / STATE_FILE)
        write_manifest(tmp)
    barrier()  # the other ranks go on once the checkpoint exists
    return path


def _unpickling_cause(err: BaseException) -> str:
    text = str(err)
    if m := re.search(r"GLOBAL (\S+)", text):
        return (
            f"it holds code or objects other than tensors and plain data ({m.group(1)}); "
            "refusing to load it (resume never unpickles code)"
        )
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.startswith(("Weights only load failed", "Check the documentation", "Please file"))
    ]
    return f"damaged or not a checkpoint file ({type(err).__name__}: {lines[0][:160] if lines else 'empty'})"


def _load_state(file: Path) -> dict[str, Any]:
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever a damaged file raises, it is one line about that file
        raise CheckpointError(f"{file}: {_unpickling_cause(err)}") from None
    version = state.get("format_version") if isinstance(state, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{file}: checkpoint format {version} != {FORMAT_VERSION}")
    return state


def _load_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            weights.update(load_file(str(file)))
        except Exception as err:  # noqa: BLE001 - SafetensorError, OSError, ...: one line about that file
            raise CheckpointError(f"{file}: damaged safetensors file ({str(err).splitlines()[0]})") from None
    if not weights:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    return weights


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Verifies the checkpoint at ``path`` and returns ``(trainer state, policy weights)``.

    Raises:
        CheckpointError: One line naming the damaged file (or unsafe content) when it cannot be used.
    """
    path = Path(path)
    verify_checkpoint(path)
    return _load_state(path / STATE_FILE), _load_weights(path / POLICY_DIR)


def _candidates(trainer: rlforge.RLTrainer, ckpt_path: str) -> list[Path]:
    """``"last"`` -> every complete checkpoint, newest first (fallbacks); else the folder itself."""
    if ckpt_path != "last":
        return [Path(ckpt_path)]
    callback = trainer.checkpoint_callback
    if callback is None:
        raise CheckpointError("ckpt_path='last' needs checkpointing enabled (a ModelCheckpoint callback)")
    found = callback.resume_candidates(trainer)
    if not found:
        searched = ", ".join(str(f) for f in callback.search_folders(trainer))
        raise CheckpointError(f"ckpt_path='last': no checkpoint found in {searched}")
    return found


def _load_policy_weights(policy: torch.nn.Module, weights: dict[str, torch.Tensor], folder: Path) -> None:
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    tied = _tied_names(policy)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise CheckpointError(
            f"{folder}: weights do not match the policy (missing {missing[:5]}, unexpected {unexpected[:5]})"
        )


def _tied_names(policy: torch.nn.Module) -> set[str]:
    """Parameter names that share storage with another name (save_pretrained stores them once)."""
    seen: dict[int, str] = {}
    tied: set[str] = set()
    for name, tensor in policy.state_dict(keep_vars=False).items():
        ptr = tensor.data_ptr()
        if ptr in seen:
            tied.update({name, seen[ptr]})
        else:
            seen[ptr] = name
    return tied


def restore(trainer: rlforge.RLTrainer, ckpt_path: str) -> Path:
    """Restores a checkpoint written by ``save`` into an already set-up trainer; returns the folder loaded.

    With ``"last"``, a damaged newest checkpoint is skipped for the newest one that verifies (one warning line
    says which); a folder named explicitly must verify.
    """
    path, skipped, error, loaded = None, [], None, None
    if trainer.is_global_zero:  # one rank picks the checkpoint, so every rank resumes from the same one
        try:
            path, skipped, loaded = _pick(trainer, ckpt_path)
        except CheckpointError as err:
            error = str(err)
    path, skipped, error = broadcast_object((path, skipped, error))
    if error is not None:
        raise CheckpointError(error)
    state, weights = loaded if loaded is not None else load_checkpoint(path)
    step = int(state["progress"]["steps"])
    if skipped and trainer.is_global_zero:
        log.warning(f"rlforge: warning: skipped damaged checkpoint(s) ({'; '.join(skipped)}); resuming from {path}")
    if trainer.is_global_zero:
        print(f"rlforge: resuming from {path} (step {step})", flush=True)
    policy = trainer.module.policy
    if is_peft_model(policy) or is_adapter_folder(path / POLICY_DIR):
        load_adapter(policy, path / POLICY_DIR)  # LoRA: only the adapters were saved
    elif needs_gather(policy):
        load_full_state_dict(policy, weights, str(path / POLICY_DIR))
    else:
        _load_policy_weights(policy, weights, path / POLICY_DIR)
    trainer.progress.load_state_dict(state["progress"])
    if trainer.optimizer is not None and state["optimizer"] is not None:
        load_optimizer_state(policy, trainer.optimizer, state["optimizer"])
    if trainer.lr_scheduler is not None and state["lr_scheduler"] is not None:
        trainer.lr_scheduler.load_state_dict(state["lr_scheduler"])
    trainer.datamodule.load_state_dict(state["datamodule"])
    rng, strategy = rank_state(state, trainer.global_rank, trainer.world_size)
    if trainer.rollout is not None:
        trainer.rollout.load_state_dict(strategy)
    for cb in trainer.callbacks:
        if cb.state_key in state["callbacks"]:
            cb.load_state_dict(state["callbacks"][cb.state_key])
    for logger, logger_state in zip(trainer.loggers, state["loggers"], strict=False):
        logger.load_state_dict(logger_state)
    trainer.callback_metrics.update(state.get("callback_metrics", {}))
    restore_rng_state(rng)
    call_hook(trainer, "on_load_checkpoint", state)
    return path


def _pick(trainer: rlforge.RLTrainer, ckpt_path: str) -> tuple[Path, list[str], Any]:
    """The checkpoint to resume, the damaged ones skipped on the way (``"last"`` falls back) and its contents."""
    skipped: list[str] = []
    for path in _candidates(trainer, ckpt_path):
        try:
            return path, skipped, load_checkpoint(path)
        except CheckpointError as err:
            if ckpt_path != "last":
                raise
            skipped.append(str(err))
    raise CheckpointError(f"ckpt_path='last': no usable checkpoint ({'; '.join(skipped)})")
