"""``benchmarks/peak_rss.py``: a command's peak RSS is its own, not the peak of the process that measures it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from peak_rss import peak_rss_mb  # noqa: E402


def test_a_child_does_not_report_its_parents_peak():
    # This process peaks above 1 GiB first; a plain spawn from it reported >= that for `python -c pass`.
    held = torch.ones(300 * 2**20)  # 1.2 GiB of fp32, touched
    del held
    idle = peak_rss_mb([sys.executable, "-c", "pass"])
    grows = peak_rss_mb([sys.executable, "-c", "b = bytearray(400 * 2**20); b[::4096] = b'x' * len(b[::4096])"])
    assert 2 < idle < 200
    assert 400 < grows < 600


def test_a_failing_command_raises_with_its_stderr():
    with pytest.raises(subprocess.CalledProcessError) as error:
        peak_rss_mb([sys.executable, "-c", "import sys; sys.exit('no such config')"])
    assert error.value.returncode == 1 and "no such config" in error.value.stderr
