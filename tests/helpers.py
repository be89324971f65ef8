"""Test helpers: run `rlforge fit` in-process with small, fast settings and read back its metrics."""

from __future__ import annotations

import csv
import random
import socket
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range, for a server a test starts.

    A port from ``bind(0)`` is an ephemeral one, and between the check and the server's own bind the kernel may hand
    that same port to any outgoing or listening socket (one CI run: ``srun`` took the MASTER_PORT it was given for
    its own I/O socket, and rank 0 failed with EADDRINUSE). Ports below the range are only taken by explicit binds.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    candidates = range(max(1024, low - 12000), low)
    for port in random.sample(candidates, min(200, len(candidates))):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {candidates.start}-{candidates.stop - 1} on 127.0.0.1")


def char_reward(prompt: str, response: str, target: str) -> float:
    """A reward that varies with the sample, so an untrained policy gets non-zero advantages."""
    return float(len(response) % 3 == 0)


def odd_target_reward(prompt: str, response: str, target: str) -> float:
    """Varies within a group only for odd targets (``addition``): the even-target groups have zero variance."""
    return float(len(response) % 2) if int(target) % 2 else 0.0


def fast_flags(policy: str, root: Path | str, **overrides: Any) -> list[str]:
    """CLI flags for a seconds-long run; ``overrides`` use ``__`` for dots (``trainer__max_steps=4``)."""
    flags: dict[str, Any] = {
        "trainer.max_steps": 2,
        "trainer.default_root_dir": str(root),
        "trainer.enable_progress_bar": "false",
        "trainer.val_check_interval": 0,
        "data.batch_size": 2,
        "module.model": policy,
        "module.group_size": 3,
        "module.sampling.max_new_tokens": 5,
        "module.reward_fns": '["tests.helpers.char_reward"]',
    }
    flags.update({key.replace("__", "."): value for key, value in overrides.items()})
    return [item for key, value in flags.items() for item in (f"--{key}", str(value))]


def metric_rows(root: Path | str, column: str = "train/loss") -> list[dict[str, str]]:
    """Rows of the (single) run under ``root`` that have ``column`` set."""
    (metrics,) = Path(root).glob("rlforge/version_*/metrics.csv")
    with open(metrics) as f:
        return [row for row in csv.DictReader(f) if row.get(column)]
