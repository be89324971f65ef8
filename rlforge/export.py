"""``rlforge export CKPT OUT_DIR``: a checkpoint's policy as a plain Hugging Face model folder."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from rlforge.checkpoint_files import (
    MANIFEST,
    checkpoint_folders_under,
    checkpoints_newest_first,
    file_digest,
    select_checkpoint,
    verify_checkpoint,
)
from rlforge.checkpoint_io import POLICY_DIR, atomic_directory, is_complete_checkpoint
from rlforge.errors import CheckpointError
from rlforge.models.peft import is_adapter_folder, save_merged

REQUIRED_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")
_POLICY_PREFIX = f"{POLICY_DIR}/"
log = logging.getLogger("rlforge")


def resolve_checkpoint(ckpt: str | Path) -> Path:
    """A checkpoint folder itself (it must verify), or the newest verified one of a checkpoints folder or a run root.

    A run root (``trainer.default_root_dir``) holds ``<name>/version_N/checkpoints``; the newest run with a
    checkpoint whose policy files verify wins, and damaged newer ones are skipped with a warning.
    """
    path = Path(ckpt)
    if is_complete_checkpoint(path):
        verify_checkpoint(path, _POLICY_PREFIX)
        return path
    candidates = [c for folder in checkpoint_folders_under(path) for c in checkpoints_newest_first(folder)]
    if not candidates:
        raise CheckpointError(
            f"{ckpt}: not a checkpoint (needs {POLICY_DIR}/ and trainer_state.pt), nor a folder holding complete ones"
        )
    found, skipped = select_checkpoint(candidates, _POLICY_PREFIX)
    if skipped:
        log.warning(f"rlforge: warning: skipped damaged checkpoint(s) ({'; '.join(skipped)}); exporting {found}")
    return found


def _check_copy(ckpt: Path, out: Path) -> None:
    """The copied policy files match the checkpoint's manifest (or, without one, the source files' digests)."""
    manifest = ckpt / MANIFEST
    listed = json.loads(manifest.read_text())["files"] if manifest.is_file() else {}
    for source in sorted((ckpt / POLICY_DIR).iterdir()):
        if not source.is_file() or (source.name.startswith("adapter_") and not (out / source.name).exists()):
            continue  # a merged LoRA export leaves the adapter files out
        entry = listed.get(f"{_POLICY_PREFIX}{source.name}")
        expected = entry["sha256"] if entry else file_digest(source)
        if file_digest(out / source.name) != expected:
            raise CheckpointError(f"{out / source.name}: copy differs from {source} (sha256 mismatch)")


def export_policy(ckpt: str | Path, out_dir: str | Path, merge: bool = False, base: str | None = None) -> Path:
    """Writes ``out_dir`` with ``config.json``, ``model.safetensors``, tokenizer and generation config.

    The checkpoint's policy files are verified before and after copying; the folder loads with
    ``AutoModelForCausalLM.from_pretrained(out_dir)`` and vLLM ``LLM(model=out_dir)``.
    A LoRA (PEFT) run's checkpoint holds an adapter folder: without ``merge`` that folder is exported as is
    (``peft.PeftModel.from_pretrained(base, out_dir)``), with ``merge`` the adapters are merged into the base.

    Args:
        ckpt: A ``step-N`` checkpoint, a checkpoints folder (its ``last``) or a run root (its newest run's last).
        out_dir: Destination (replaced atomically if it exists).
        merge: Merge a PEFT adapter into its base model (no effect on a full fine-tune's checkpoint).
        base: Base model of the adapter (default: ``base_model_name_or_path`` of its ``adapter_config.json``).
    """
    source = resolve_checkpoint(ckpt)
    policy = source / POLICY_DIR
    if is_adapter_folder(policy) and not merge:
        return export_adapter(policy, out_dir)
    with atomic_directory(out_dir) as tmp:
        for item in policy.iterdir():
            if item.is_file() and not (merge and item.name.startswith("adapter_")):
                shutil.copy2(item, tmp / item.name)
        _check_copy(source, tmp)
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
