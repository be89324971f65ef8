"""Low-level checkpoint machinery shared by the trainer and callbacks: atomic writes and RNG state."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

POLICY_DIR = "policy"
"""Sub-folder of a checkpoint holding the policy as a Hugging Face folder."""
STATE_FILE = "trainer_state.pt"
"""File of a checkpoint holding everything but the policy weights."""


def is_complete_checkpoint(path: str | Path) -> bool:
    """True when ``path`` holds a whole checkpoint: trainer state, policy config and weights.

    Checkpoints are renamed into place only once written, so this fails only for folders made by hand
    or by a writer that was not atomic; ``ckpt_path="last"`` never resumes from such a folder.
    """
    path = Path(path)
    policy = path / POLICY_DIR
    # A LoRA run's policy folder is a PEFT adapter folder (adapter_config.json + adapter_model.safetensors).
    config = (policy / "config.json").is_file() or (policy / "adapter_config.json").is_file()
    return (path / STATE_FILE).is_file() and config and any(policy.glob("*.safetensors"))


@contextlib.contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yields a temp folder beside ``final``; renames it to ``final`` only if the block succeeds.

    A crash mid-write leaves the previous ``final`` (if any) untouched and no half-written folder.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        trash = None
        if final.exists():
            trash = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, trash)
        os.replace(tmp, final)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Writes ``text`` to ``path`` via a temp file and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) RNG states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seeds Python, NumPy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
