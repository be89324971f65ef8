"""Acceptance: each shipped agentic config raises greedy held-out success by >= 20 points on CPU, offline."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["agent_tool.yaml", "agent_multiturn.yaml"])
def test_agent_config_raises_heldout_success_by_20_points(config: str, tmp_path: Path) -> None:
    # The real CLI on the shipped config, as a user runs it (only the run folder moves: cwd is tmp_path).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit", "--config", str(REPO / "configs" / config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("rlforge_runs/*/rlforge/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    accuracy = {int(r["step"]): float(r["val/accuracy"]) for r in rows if r.get("val/accuracy")}
    first, last = accuracy[min(accuracy)], accuracy[max(accuracy)]
    assert min(accuracy) == 0 and last - first >= 0.20, f"val/accuracy {first:.3f} -> {last:.3f}"
    turns = [float(r["rollout/turns_mean"]) for r in rows if r.get("rollout/turns_mean")]
    tool_calls = [float(r["rollout/tool_calls_mean"]) for r in rows if r.get("rollout/tool_calls_mean")]
    assert min(turns) > 1
    if config == "agent_tool.yaml":
        assert min(tool_calls) > 0
