"""``rlforge plot RUN_DIR``: one PNG with the reward, KL, entropy and response-length curves of a run."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from lightning_utilities.core.imports import RequirementCache

from rlforge.errors import ConfigError, DataError, MissingDependencyError

PANELS = (
    ("rollout/reward_mean", "reward (rollout mean)", "val/accuracy"),
    ("train/kl", "KL to reference", None),
    ("train/entropy", "token entropy", None),
    ("rollout/response_len", "response length (tokens)", None),
)

# Why a panel's metric can be absent from a healthy run (unmeasured metrics are not logged as 0).
_ABSENT_BECAUSE = {"train/kl": "not measured: beta = 0 and no KLMonitor"}


def find_metrics(run_dir: str | Path) -> Path:
    """``run_dir/metrics.csv``, else the newest ``metrics.csv`` below ``run_dir``."""
    run_dir = Path(run_dir)
    if (run_dir / "metrics.csv").is_file():
        return run_dir / "metrics.csv"
    found = sorted(run_dir.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ConfigError(f"{run_dir}: no metrics.csv in it or below it (is it an rlforge run folder?)")
    return found[-1]


def read_series(metrics_csv: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Column -> (steps, values), skipping empty cells."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    with open(metrics_csv, encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        for row in reader:
            line = reader.line_num
            step = int(_number(row.get("step"), metrics_csv, line, "step"))
            for key, cell in row.items():
                if (
                    key != "step"
                    and cell not in ("", None)
                    and math.isfinite(value := _number(cell, metrics_csv, line, key))
                ):
                    steps, values = series.setdefault(key, ([], []))
                    steps.append(step)
                    values.append(value)
    return series


def _number(cell: str | list | None, metrics_csv: Path, line: int, column: str | None) -> float:
    """A CSV cell as a float, or a one-line ``DataError`` naming the file, line and column."""
    try:
        return float(cell)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(f"{metrics_csv}: line {line}: column {column!r} is not a number: {cell!r}") from None


def plot_run(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Writes the curves PNG (default ``<folder of metrics.csv>/curves.png``) and returns its path.

    Args:
        run_dir: A run folder (``.../version_N``) or any folder above one.
        output: PNG path.
    """
    if not RequirementCache("matplotlib"):
        raise MissingDependencyError("rlforge plot needs matplotlib: pip install 'rlforge[plot]'")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics_csv = find_metrics(run_dir)
    series = read_series(metrics_csv)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (key, title, extra) in zip(axes.flat, PANELS, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        shown = [k for k in (key, extra) if k and k in series]
        for name in shown:
            steps, values = series[name]
            ax.plot(steps, values, marker="." if len(steps) < 50 else None, label=name)
        if shown:
            ax.legend(loc="best", fontsize=8)
        else:
            why = _ABSENT_BECAUSE.get(key, "not logged")
            ax.text(0.5, 0.5, f"{key}\n{why}", ha="center", va="center", transform=ax.transAxes, color="gray")
    fig.suptitle(str(metrics_csv.parent))
    out = Path(output) if output else metrics_csv.parent / "curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
