"""Ctrl-C during a run and during its checkpoint, `run.json` outside a repository, and the CSV logger's appends
(hardening issue cases 15, 16, 25; the CLI run.json case is in test_checkpoints_crash.py). Real subprocesses and
signals; expected values come from the files.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlforge.loggers import CSVLogger
from rlforge.loggers import csv_logger as csv_logger_module
from rlforge.trainer.checkpointing import load_checkpoint
from tests.helpers import fast_flags
from tests.reliability.ckpt_helpers import CALLBACKS, REPO, _ckpts, _env, _fit, _rlforge_lines, _run_dir


def _interrupt(policy: str, root: Path, save_seconds: float, signals: int) -> subprocess.CompletedProcess:
    probe = "{class_path: " + CALLBACKS + f".PauseForSignal, init_args: {{folder: {root}, step: 3, "
    probe += f"save_seconds: {save_seconds}}}}}"
    args = fast_flags(policy, root, trainer__max_steps=6)
    args += [
        "--trainer.callbacks",
        f"[{probe}, {{class_path: rlforge.ModelCheckpoint, init_args: {{every_n_steps: 100}}}}]",
    ]
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlforge.cli", "fit", *args],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that started this test in the background ignores SIGINT, and children inherit that: Python
        # would then never raise KeyboardInterrupt. The run under test must see Ctrl-C as a user's terminal sends it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def wait_for(name: str) -> None:
        deadline = time.monotonic() + 300
        while not (root / name).exists():
            assert proc.poll() is None and time.monotonic() < deadline, f"no {name} marker"
            time.sleep(0.1)

    wait_for("paused")  # in step 3's rollout: steps 1-2 are done, none saved yet (every_n_steps=100)
    proc.send_signal(signal.SIGINT)
    if signals == 2:
        wait_for("saving")  # the interrupt checkpoint is being written
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_saves_the_completed_steps(tiny_policy_dir, tmp_path):
    proc = _interrupt(tiny_policy_dir, tmp_path, save_seconds=0, signals=1)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert _rlforge_lines(proc.stderr) == ["rlforge: interrupted (Ctrl-C); resume with --ckpt_path last"]
    saved = _ckpts(tmp_path) / "step-000002"
    load_checkpoint(saved)
    assert proc.stdout.splitlines()[-1].startswith("rlforge: interrupted after ")
    assert proc.stdout.splitlines()[-1].endswith(f"run folder {_run_dir(tmp_path)}; last checkpoint {saved}")
    assert json.loads((_run_dir(tmp_path) / "run.json").read_text())["status"] == "interrupted"


@pytest.mark.slow
def test_second_ctrl_c_during_the_interrupt_save_keeps_the_completed_steps(tiny_policy_dir, tmp_path):
    proc = _interrupt(tiny_policy_dir, tmp_path, save_seconds=3, signals=2)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert _rlforge_lines(proc.stderr)[-1] == "rlforge: interrupted (Ctrl-C); resume with --ckpt_path last"
    load_checkpoint(_ckpts(tmp_path) / "step-000002")  # the save finished: steps 1-2 are not lost
    assert json.loads((_ckpts(tmp_path) / "last.json").read_text())["step"] == 2
    assert not list(_ckpts(tmp_path).glob(".*tmp*"))


# ------------------------------------------------------------------------------------- 22: run.json
def test_run_json_has_no_git_commit_outside_a_repository(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    trainer = _fit(tiny_policy_dir, tmp_path, 1)
    manifest = json.loads((trainer.log_dir / "run.json").read_text())
    assert manifest["git"] is None and manifest["status"] == "success"


# ---------------------------------------------------------------------------------- 25: CSV appends
def _reference_csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def test_csv_logger_appends_rows_and_rewrites_only_for_new_columns(tmp_path, monkeypatch):
    rewrites: list[str] = []
    real = csv_logger_module.atomic_write_text
    monkeypatch.setattr(csv_logger_module, "atomic_write_text", lambda p, t: (rewrites.append(str(p)), real(p, t)))
    logger = CSVLogger()
    logger.bind(str(tmp_path))
    logger.log_metrics({"val/accuracy": 0.5}, 0)
    for step in range(1, 201):
        logger.log_metrics({"train/loss": step / 7, "reward/mean": 0.25}, step)
    logger.log_metrics({"val/accuracy": 0.75}, 200)  # same step: added to its row in place
    logger.finalize("success")
    assert rewrites == [str(logger.metrics_file)] * 2  # the first row, then the first with new columns
    rows = [{"step": 0, "val/accuracy": 0.5}]
    rows += [{"step": s, "train/loss": s / 7, "reward/mean": 0.25} for s in range(1, 201)]
    rows[-1]["val/accuracy"] = 0.75
    expected = _reference_csv(rows, ["step", "val/accuracy", "train/loss", "reward/mean"])
    assert logger.metrics_file.read_text() == expected

    resumed = CSVLogger(version=1)  # a resumed run writes the restored history whole, then appends again
    resumed.load_state_dict(logger.state_dict())
    resumed.bind(str(tmp_path))
    resumed.log_metrics({"train/loss": 1.0, "reward/mean": 0.5}, 201)
    rows.append({"step": 201, "train/loss": 1.0, "reward/mean": 0.5})
    assert resumed.metrics_file.read_text() == _reference_csv(
        rows, ["step", "val/accuracy", "train/loss", "reward/mean"]
    )
