"""Running `rlforge fit` on several gloo ranks with torchrun, and reading what the run left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }


def fit(flags: list[str], ranks: int = 1, timeout: float = 300, extra_env: dict | None = None, command: str = "fit"):
    """`rlforge fit` (or ``command``) alone (``ranks=1``) or under torchrun with ``ranks`` gloo processes."""
    if ranks == 1:
        cmd = [sys.executable, "-m", "rlforge", command, *flags]
    else:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "rlforge", command, *flags,
        ]  # fmt: skip
    return subprocess.run(
        cmd, cwd=REPO, env={**env(), **(extra_env or {})}, capture_output=True, text=True, timeout=timeout
    )


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """The safetensors weights of an HF folder, or of a checkpoint's ``policy`` folder."""
    folder = folder / "policy" if (folder / "policy").is_dir() else folder
    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
