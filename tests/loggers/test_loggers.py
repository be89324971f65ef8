"""W&B offline (no key, no network, nothing outside the run and W&B dirs), TensorBoard, several loggers at once."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fast_flags
from tests.loggers.wandb_records import artifacts, config, history

REPO = Path(__file__).resolve().parents[2]
STEPS = 3


def _fit(policy: str, tmp: Path, logger_flags: list[str]) -> tuple[Path, dict[str, str]]:
    """Runs `rlforge fit` from an empty folder with HOME and every W&B folder redirected into ``tmp``."""
    names = ("home", "cwd", "wandb_dir", "wandb_cache", "wandb_data", "wandb_config", "mpl", "torch_ext")
    dirs = {name: tmp / name for name in names}
    dirs["cwd"].mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOME": str(dirs["home"]),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(dirs["wandb_dir"]),
        "WANDB_CACHE_DIR": str(dirs["wandb_cache"]),
        "WANDB_DATA_DIR": str(dirs["wandb_data"]),
        "WANDB_CONFIG_DIR": str(dirs["wandb_config"]),
        # torchmetrics imports matplotlib when it is installed, and matplotlib keeps a font cache in HOME
        # unless MPLCONFIGDIR says where (the README says so next to the W&B folders).
        "MPLCONFIGDIR": str(dirs["mpl"]),
        # The CPU decode kernels are built on first use into ~/.cache/torch_extensions unless this says where.
        "TORCH_EXTENSIONS_DIR": str(dirs["torch_ext"]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.pop("WANDB_API_KEY", None)
    root = tmp / "runs"
    callbacks = (
        "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 2}},"
        " {class_path: rlforge.SampleLogger, init_args: {every_n_steps: 1, num_samples: 2}}]"
    )
    flags = fast_flags(policy, root, trainer__max_steps=STEPS) + ["--trainer.callbacks", callbacks, *logger_flags]
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit", *flags], cwd=dirs["cwd"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not dirs["home"].exists() or not any(dirs["home"].rglob("*")), list(dirs["home"].rglob("*"))
    assert not any(dirs["cwd"].iterdir()), list(dirs["cwd"].iterdir())
    return root, {k: str(v) for k, v in dirs.items()}


def _wandb_file(root: Path) -> Path:
    (path,) = root.glob("rlforge/*/wandb/offline-run-*/run-*.wandb")
    return path


def test_wandb_offline_run_has_metrics_config_tables_and_checkpoints(tiny_policy_dir, tmp_path):
    root, _ = _fit(
        tiny_policy_dir,
        tmp_path,
        ["--trainer.logger", "rlforge.loggers.WandbLogger", "--trainer.logger.log_model", "all"],
    )
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()}
    assert written <= {"runs", "wandb_cache", "wandb_data", "wandb_config", "wandb_dir", "mpl", "torch_ext"}

    run_file = _wandb_file(root)
    rows = history(run_file)
    assert sorted(rows) == list(range(1, STEPS + 1))
    for step in rows:
        assert {"train/loss", "rollout/reward_mean", "train/entropy", "perf/sync_s"} <= set(rows[step])
        assert rows[step]["samples/_type"] == "table-file" and rows[step]["samples/nrows"] == 2
    assert config(run_file)["trainer"]["max_steps"] == STEPS  # the resolved CLI config

    models = [a for a in artifacts(run_file) if a.type == "model"]
    assert [sorted(a.aliases) for a in models] == [["latest", "step-2"], ["latest", "step-3"]]
    assert {c.path for c in models[0].manifest.contents} >= {"policy/model.safetensors", "trainer_state.pt"}

    run_dir = run_file.parents[2]  # <root>/rlforge/<run id>: run.json and samples.jsonl live beside wandb/
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 2, 2, 3, 3] and all("response" in s for s in samples)
    assert json.loads((run_dir / "run.json").read_text())["config"]["trainer"]["max_steps"] == STEPS


def test_several_loggers_get_the_same_metrics(tiny_policy_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loggers = (
        "[{class_path: rlforge.CSVLogger}, {class_path: rlforge.TensorBoardLogger},"
        " {class_path: rlforge.WandbLogger, init_args: {offline: true}}]"
    )
    root, _ = _fit(tiny_policy_dir, tmp_path, ["--trainer.logger", loggers])
    (metrics,) = root.glob("rlforge/version_0/metrics.csv")
    with open(metrics) as f:
        csv_loss = {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f)}
    (events,) = root.glob("tensorboard/version_0/events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    tb_loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    wandb_loss = {step: row["train/loss"] for step, row in history(_wandb_file(root)).items()}
    assert sorted(csv_loss) == list(range(1, STEPS + 1))
    assert wandb_loss == csv_loss
    assert tb_loss == pytest.approx(csv_loss, rel=1e-6)  # TensorBoard stores float32
    assert "samples/text_summary" in acc.Tags()["tensors"] and "config/text_summary" in acc.Tags()["tensors"]
