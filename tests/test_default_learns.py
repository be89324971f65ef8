"""Acceptance: `rlforge fit` with no arguments (the embedded default) really learns, offline, on CPU."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_default_fit_raises_heldout_accuracy_by_20_points(tmp_path):
    # The real console entry point with no arguments, as a user runs it (only the run folder moves).
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit"], cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("rlforge_runs/rlforge/version_*/metrics.csv")
    accuracy = {
        int(r["step"]): float(r["val/accuracy"]) for r in csv.DictReader(open(metrics)) if r.get("val/accuracy")
    }
    first, last = accuracy[min(accuracy)], accuracy[max(accuracy)]
    assert min(accuracy) == 0
    assert last - first >= 0.20, f"val/accuracy {first:.3f} -> {last:.3f}"
    assert (tmp_path / "rlforge_runs" / "rlforge" / "version_0" / "checkpoints" / "last.json").is_file()
