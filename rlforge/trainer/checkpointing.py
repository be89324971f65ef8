"""Saving and restoring a full training state: policy (HF folder) + optimizer, RNG, data, callbacks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlforge.checkpoint_io import (
    POLICY_DIR,
    STATE_FILE,
    atomic_directory,
    capture_rng_state,
    is_complete_checkpoint,
    restore_rng_state,
)
from rlforge.errors import CheckpointError
from rlforge.models.peft import is_adapter_folder, is_peft_model, load_adapter
from rlforge.trainer.call import call_hook

if TYPE_CHECKING:
    import rlforge

__all__ = ["POLICY_DIR", "STATE_FILE", "build_state", "restore", "save"]

FORMAT_VERSION = 1


def build_state(trainer: rlforge.RLTrainer) -> dict[str, Any]:
    """Everything but the policy weights, as one picklable dict."""
    return {
        "format_version": FORMAT_VERSION,
        "progress": trainer.progress.state_dict(),
        "optimizer": trainer.optimizer.state_dict() if trainer.optimizer is not None else None,
        "lr_scheduler": trainer.lr_scheduler.state_dict() if trainer.lr_scheduler is not None else None,
        "rng": capture_rng_state(),
        "datamodule": trainer.datamodule.state_dict(),
        "strategy": trainer.strategy.state_dict(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "loggers": [logger.state_dict() for logger in trainer.loggers],
        "callback_metrics": dict(trainer.callback_metrics),
    }


def save(trainer: rlforge.RLTrainer, path: Path) -> Path:
    """Writes ``path/policy`` (loads with ``AutoModelForCausalLM.from_pretrained``; for a PEFT policy, the adapter
    folder ``peft.PeftModel.from_pretrained(base, path/policy)`` loads) and ``path/trainer_state.pt``."""
    state = build_state(trainer)
    call_hook(trainer, "on_save_checkpoint", state)
    module = trainer.module
    with atomic_directory(path) as tmp:
        module.policy.save_pretrained(tmp / POLICY_DIR, safe_serialization=True)
        if module.tokenizer is not None:
            module.tokenizer.save_pretrained(tmp / POLICY_DIR)
        torch.save(state, tmp / STATE_FILE)
    return path


def resolve(trainer: rlforge.RLTrainer, ckpt_path: str) -> Path:
    """``"last"`` -> the newest checkpoint of the trainer's ``ModelCheckpoint``; else the folder itself."""
    if ckpt_path == "last":
        callback = trainer.checkpoint_callback
        if callback is None:
            raise CheckpointError("ckpt_path='last' needs checkpointing enabled (a ModelCheckpoint callback)")
        last = callback.last_checkpoint_path(trainer)
        if last is None:
            raise CheckpointError(f"ckpt_path='last': no checkpoint found in {callback.resolve_dirpath(trainer)}")
        return last
    path = Path(ckpt_path)
    if not is_complete_checkpoint(path):
        raise CheckpointError(
            f"ckpt_path {ckpt_path!r} is not an rlforge checkpoint (needs {POLICY_DIR}/ and {STATE_FILE})"
        )
    return path


def _load_policy_weights(policy: torch.nn.Module, folder: Path) -> None:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(str(file)))
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


def restore(trainer: rlforge.RLTrainer, ckpt_path: str) -> None:
    """Restores a checkpoint written by ``save`` into an already set-up trainer."""
    path = resolve(trainer, ckpt_path)
    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    if state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {state.get('format_version')} != {FORMAT_VERSION}")
    if is_peft_model(trainer.module.policy) or is_adapter_folder(path / POLICY_DIR):
        load_adapter(trainer.module.policy, path / POLICY_DIR)  # LoRA: only the adapters were saved
    else:
        _load_policy_weights(trainer.module.policy, path / POLICY_DIR)
    trainer.progress.load_state_dict(state["progress"])
    if trainer.optimizer is not None and state["optimizer"] is not None:
        trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.lr_scheduler is not None and state["lr_scheduler"] is not None:
        trainer.lr_scheduler.load_state_dict(state["lr_scheduler"])
    trainer.datamodule.load_state_dict(state["datamodule"])
    trainer.strategy.load_state_dict(state["strategy"])
    for cb in trainer.callbacks:
        if cb.state_key in state["callbacks"]:
            cb.load_state_dict(state["callbacks"][cb.state_key])
    for logger, logger_state in zip(trainer.loggers, state["loggers"], strict=False):
        logger.load_state_dict(logger_state)
    trainer.callback_metrics.update(state.get("callback_metrics", {}))
    restore_rng_state(state["rng"])
    call_hook(trainer, "on_load_checkpoint", state)
