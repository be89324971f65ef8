"""What a checkpoint folder holds and how to trust it: a sha256 manifest, written last, checked before use.

A checkpoint is ``step-N/`` with ``policy/`` (an HF folder), ``trainer_state.pt`` and ``manifest.json`` (size
and sha256 of every other file). Checkpoints from before the manifest are checked structurally only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from rlforge.checkpoint_io import POLICY_DIR, STATE_FILE, atomic_write_json, is_complete_checkpoint, remove_orphans
from rlforge.errors import CheckpointError

MANIFEST = "manifest.json"
"""File of a checkpoint listing the size and sha256 of every other file (written last)."""
LAST_POINTER = "last.json"
"""File of a checkpoints folder naming its newest checkpoint."""
CHECKPOINTS_DIR = "checkpoints"
"""Sub-folder of a run folder holding its checkpoints."""
_STEP_DIR = re.compile(r"step-(\d+)")
_VERSION_DIR = re.compile(r"version_(\d+)")
_CHUNK = 1 << 22


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def write_manifest(folder: Path) -> None:
    """Writes ``folder/manifest.json`` with the size and sha256 of every file under ``folder`` (fsynced)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": file_digest(p)} for p in files}
    atomic_write_json(folder / MANIFEST, {"format": "rlforge-checkpoint", "files": entries}, durable=True)


def check_safetensors(path: Path) -> None:
    """Raises ``CheckpointError`` unless ``path``'s header parses and its size matches the tensors it lists."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < length <= size - 8:
                raise ValueError("no valid header")
            header = json.loads(f.read(length))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise CheckpointError(f"{path}: damaged safetensors file ({err})") from None
    if 8 + length + end != size:
        raise CheckpointError(f"{path}: damaged safetensors file ({size} bytes, its header needs {8 + length + end})")


def verify_checkpoint(path: str | Path, prefix: str = "") -> None:
    """Raises a one-line ``CheckpointError`` unless the checkpoint at ``path`` is whole and unchanged.

    Args:
        path: A ``step-N`` folder.
        prefix: Check only files under this sub-path (``"policy/"`` for what ``export`` copies).
    """
    path = Path(path)
    if not is_complete_checkpoint(path):
        raise CheckpointError(f"{path}: not an rlforge checkpoint (needs {POLICY_DIR}/ and {STATE_FILE})")
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
            items = [(str(name), int(e["size"]), str(e["sha256"])) for name, e in files.items()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{manifest}: unreadable manifest ({type(err).__name__})") from None
        for name, size, sha in items:
            if not name.startswith(prefix):
                continue
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{file}: missing (listed in {MANIFEST})")
            if file.stat().st_size != size:
                raise CheckpointError(f"{file}: {file.stat().st_size} bytes, {MANIFEST} says {size} (truncated?)")
            if file_digest(file) != sha:
                raise CheckpointError(f"{file}: content differs from {MANIFEST} (sha256 mismatch)")
    for weights in sorted((path / POLICY_DIR).glob("*.safetensors")):
        check_safetensors(weights)


def checkpoints_newest_first(folder: Path) -> list[Path]:
    """Complete checkpoints of one checkpoints folder: ``last.json``'s first, then ``step-N`` by N descending."""
    if not folder.is_dir():
        return []
    remove_orphans(folder)
    steps = sorted(((int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP_DIR.fullmatch(p.name))), reverse=True)
    ordered = [p for _, p in steps]
    try:
        pointed = folder / json.loads((folder / LAST_POINTER).read_text())["name"]
    except (OSError, ValueError, KeyError, TypeError):
        pointed = None
    if pointed in ordered:
        ordered.remove(pointed)
        ordered.insert(0, pointed)
    return [p for p in ordered if is_complete_checkpoint(p)]


def find_last_checkpoint(dirpath: str | Path) -> Path | None:
    """The checkpoint ``dirpath/last.json`` names; if it is missing or incomplete, the newest complete ``step-N``."""
    found = checkpoints_newest_first(Path(dirpath))
    return found[0] if found else None


def runs_newest_first(folders: Iterable[Path]) -> list[Path]:
    """Run folders ordered newest first: ``version_N`` by N descending, then other names by modification time."""
    folders = [f for f in folders if f.is_dir()]

    def key(folder: Path) -> tuple[int, float]:
        m = _VERSION_DIR.fullmatch(folder.name)
        return (int(m.group(1)) if m else -1, folder.stat().st_mtime)

    return sorted(folders, key=key, reverse=True)


def checkpoint_folders_under(root: Path) -> list[Path]:
    """Checkpoints folders a path can mean: itself, its runs' (``[name/]version_N``, newest first), its own."""
    runs = runs_newest_first([*root.glob("version_*"), *root.glob("*/version_*")]) if root.is_dir() else []
    return [root, *(run / CHECKPOINTS_DIR for run in runs), root / CHECKPOINTS_DIR]


def select_checkpoint(candidates: Iterable[Path], prefix: str = "") -> tuple[Path, list[str]]:
    """The first candidate that verifies, and the one-line reasons of those skipped before it.

    Raises:
        CheckpointError: When none verifies (naming why each was rejected).
    """
    skipped: list[str] = []
    seen: set[Path] = set()
    for path in candidates:
        if path in seen:
            continue
        seen.add(path)
        try:
            verify_checkpoint(path, prefix)
        except CheckpointError as err:
            skipped.append(str(err))
            continue
        return path, skipped
    if skipped:
        raise CheckpointError(f"no usable checkpoint: {'; '.join(skipped)}")
    raise CheckpointError("no checkpoint found")
