"""Low-level checkpoint machinery shared by the trainer and callbacks: durable atomic writes and RNG state."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
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

# Temp and trash folders of an atomic write carry the writer's pid, so a later run removes only dead writers' ones.
_ORPHAN = re.compile(r"\..+\.(?:tmp-(?P<tmp_pid>\d+)-.+|tmp-[a-z0-9_]+|old-(?P<old_pid>\d+))")


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


def fsync_path(path: str | Path) -> None:
    """Flushes a file's or a folder's data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsyncs every file and folder under ``root`` (deepest first), then ``root`` itself."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(Path(folder) / name)
        fsync_path(folder)


@contextlib.contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yields a temp folder beside ``final``; fsyncs it and renames it to ``final`` only if the block succeeds.

    A crash mid-write leaves the previous ``final`` (if any) untouched and at most a ``.NAME.tmp-PID-*``
    folder, which ``remove_orphans`` deletes on the next run.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        trash = None
        if final.exists():
            trash = final.with_name(f".{final.name}.old-{os.getpid()}")
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(final, trash)
        os.replace(tmp, final)
        fsync_path(final.parent)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def remove_orphans(folder: str | Path) -> list[Path]:
    """Deletes temp/trash folders that writers killed mid-save left in ``folder``; returns what it removed."""
    folder = Path(folder)
    removed = []
    for path in folder.iterdir() if folder.is_dir() else []:
        m = _ORPHAN.fullmatch(path.name)
        if not m or not path.is_dir():
            continue
        pid = m.group("tmp_pid") or m.group("old_pid")
        if pid is None or not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def atomic_write_text(path: str | Path, text: str, durable: bool = False) -> None:
    """Writes ``text`` to ``path`` via a temp file and rename (``durable``: fsynced before and after the rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_path(path.parent)


def atomic_write_json(path: str | Path, obj: Any, durable: bool = False) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", durable=durable)


def unwritable_reason(folder: str | Path) -> str | None:
    """Why files cannot be created in ``folder`` (created if missing), or ``None`` when they can.

    Tries for real (create and delete a probe file) rather than ``os.access``, which says yes to root on a
    read-only file system.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".rlforge-write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"{err.strerror or type(err).__name__}: {err.filename or folder}"
    return None


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) RNG states as tensors and plain values (``weights_only``-loadable)."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restores ``capture_rng_state``'s result."""
    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    key = npy["key"].numpy().astype(np.uint32)
    np.random.set_state((npy["bit_generator"], key, npy["pos"], npy["has_gauss"], npy["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seeds Python, NumPy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
