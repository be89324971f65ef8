"""``rlforge export CKPT OUT_DIR``: a checkpoint's policy as a plain Hugging Face model folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from rlforge.callbacks.checkpoint import find_last_checkpoint
from rlforge.checkpoint_io import POLICY_DIR, atomic_directory, is_complete_checkpoint
from rlforge.errors import CheckpointError
from rlforge.models.peft import is_adapter_folder, save_merged

REQUIRED_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")


def resolve_checkpoint(ckpt: str | Path) -> Path:
    """A checkpoint folder itself, or the last complete one of a checkpoints folder or of a run root."""
    path = Path(ckpt)
    if is_complete_checkpoint(path):
        return path
    for folder in (path, path / "checkpoints"):
        last = find_last_checkpoint(folder)
        if last is not None:
            return last
    raise CheckpointError(
        f"{ckpt}: not a checkpoint (needs {POLICY_DIR}/ and trainer_state.pt), nor a folder holding complete ones"
    )


def export_policy(ckpt: str | Path, out_dir: str | Path, merge: bool = False, base: str | None = None) -> Path:
    """Writes ``out_dir`` with ``config.json``, ``model.safetensors``, tokenizer and generation config.

    The folder loads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and vLLM ``LLM(model=out_dir)``.
    A LoRA (PEFT) run's checkpoint holds an adapter folder: without ``merge`` that folder is exported as is
    (``peft.PeftModel.from_pretrained(base, out_dir)``), with ``merge`` the adapters are merged into the base.

    Args:
        ckpt: A ``step-N`` checkpoint, a checkpoints folder (its ``last``) or a run root with ``checkpoints/``.
        out_dir: Destination (replaced atomically if it exists).
        merge: Merge a PEFT adapter into its base model (no effect on a full fine-tune's checkpoint).
        base: Base model of the adapter (default: ``base_model_name_or_path`` of its ``adapter_config.json``).
    """
    policy = resolve_checkpoint(ckpt) / POLICY_DIR
    if is_adapter_folder(policy) and not merge:
        return export_adapter(policy, out_dir)
    with atomic_directory(out_dir) as tmp:
        for item in policy.iterdir():
            if item.is_file() and not (merge and item.name.startswith("adapter_")):
                shutil.copy2(item, tmp / item.name)
        if merge and is_adapter_folder(policy):
            save_merged(policy, tmp, base)  # LoRA run: base + adapters as one plain HF model
        if not (tmp / "generation_config.json").is_file():
            from transformers import AutoConfig, GenerationConfig

            GenerationConfig.from_model_config(AutoConfig.from_pretrained(tmp)).save_pretrained(tmp)
        missing = [name for name in REQUIRED_FILES if not (tmp / name).is_file()]
        if missing or not any(tmp.glob("*.safetensors")):
            raise CheckpointError(f"{policy}: incomplete policy folder (missing {missing or ['*.safetensors']})")
    return Path(out_dir)


def export_adapter(policy: Path, out_dir: str | Path) -> Path:
    """Copies a PEFT adapter folder (adapter config and weights, tokenizer) to ``out_dir`` atomically."""
    with atomic_directory(out_dir) as tmp:
        for item in policy.iterdir():
            if item.is_file():
                shutil.copy2(item, tmp / item.name)
    return Path(out_dir)
