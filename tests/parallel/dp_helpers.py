"""Running `rlforge fit` on several gloo ranks with torchrun, and reading what the run left behind."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]

# AdamW's first update of an element is lr * g / (|g| + eps). Elements whose true gradient is ~0 carry float noise
# (|g| ~ 1e-10, a different value for another summation order: two half-batch backwards and a reduce-scatter, or
# TP's split matmuls), and the update passes it on as lr * dg / eps. With torch's default eps = 1e-8 that moved one
# element of layers.3.o_proj (gradient -2.6e-10 in one process, 1.0e-11 under TP 2) by 2.6e-5, and 7e-5 with the KL
# term; eps = 1e-6 bounds it by lr * 3e-9 / 1e-6 = 3e-6 (measured with eps = 1e-6: 3.0e-6 under TP 2). A wrong gradient
# division, data split or a lost optimizer state moves weights by ~1e-3 (and the grad norms by a factor).
OPTIMIZER = "{class_path: torch.optim.AdamW, init_args: {lr: 1.0e-3, eps: 1.0e-6}}"
WEIGHT_TOL = 1e-5


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        # A rank that aborts in C++ prints every thread's Python stack (see tests/test_slurm.py's _env).
        "PYTHONFAULTHANDLER": "1",
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
    done = subprocess.run(
        cmd, cwd=REPO, env={**env(), **(extra_env or {})}, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        done.stderr += first_fatal(done.stderr)
    return done


# What a rank that dies in C++ prints first: libstdc++'s uncaught exception, glibc's heap check, Python's fatal error.
_FATAL = ("terminate called", "what():", "Fatal Python error", "free(): ", "double free", "corrupted ", "malloc(): ")


def first_fatal(stderr: str, lines: int = 12) -> str:
    """The first fatal-error lines of ``stderr`` and the ``lines`` after them, as a block to append to it.

    Tests quote the tail of a failed run's stderr, and behind a fatal error the faulthandler's per-thread stacks and
    its list of extension modules push the cause out of that tail; ``""`` when there is no fatal error.
    """
    text = stderr.splitlines()
    at = next((i for i, line in enumerate(text) if any(mark in line for mark in _FATAL)), None)
    if at is None:
        return ""
    return "\n--- the first fatal error above, repeated ---\n" + "\n".join(text[at : at + 1 + lines]) + "\n"


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


def only_run(root: Path) -> Path:
    """The one run folder under ``root`` (several ranks must make one run, not one per rank)."""
    runs = sorted((root / "rlforge").glob("version_*"))
    assert [r.name for r in runs] == ["version_0"], runs
    return runs[0]


def step_rows(run: Path) -> dict[int, dict[str, str]]:
    """``metrics.csv`` rows with ``train/loss`` by step; each step logged once."""
    with open(run / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), steps
    return {int(r["step"]): r for r in rows}
