"""Checkpoints, run folders, crash and interrupt safety, run records (hardening issue cases 9, 12, 13, 15, 16, 22, 25).

CLI cases run real `python -m rlforge.cli` subprocesses; crash cases use real signals; the unsafe checkpoint is a
real pickle payload. Expected values come from the files themselves (hashlib, csv, git), not from rlforge.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlforge.checkpoint_io import capture_rng_state, restore_rng_state
from rlforge.errors import CheckpointError
from rlforge.export import export_policy
from rlforge.trainer.checkpointing import load_checkpoint, plain_state
from tests.helpers import fast_flags
from tests.reliability.ckpt_helpers import (  # noqa: F401 - shared by the checkpoint test files
    CALLBACKS,
    REPO,
    _ckpts,
    _cli,
    _cli_args,
    _env,
    _fit,
    _rlforge_lines,
    _run_dir,
    _sha,
    _steps,
    _trainer,
)


@pytest.fixture(scope="module")
def two_step_run(tiny_policy_dir, tmp_path_factory) -> Path:
    """An in-process run with checkpoints after steps 1 and 2 (copy it before damaging it)."""
    root = tmp_path_factory.mktemp("two_steps")
    _fit(tiny_policy_dir, root, 2)
    return root


@pytest.fixture(scope="module")
def cli_run(tiny_policy_dir, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`rlforge fit` (2 steps, a checkpoint per step) as a subprocess started from the repository."""
    root = tmp_path_factory.mktemp("cli_run")
    proc = _cli(_cli_args(tiny_policy_dir, root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, proc


def _copy(root: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(root, dest)
    return dest


# ------------------------------------------------------------------- 9: resume never unpickles code
class _Payload:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _poison(ckpt: Path, marker: Path) -> None:
    """Replaces trainer_state.pt with a pickle that runs `touch MARKER`, and fixes the manifest to match."""
    state = ckpt / "trainer_state.pt"
    torch.save({"format_version": 2, "progress": {"steps": 1}, "x": _Payload(f"touch {marker}")}, state)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"]["trainer_state.pt"] = {"size": state.stat().st_size, "sha256": _sha(state)}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.slow
def test_pickle_payload_in_trainer_state_never_runs(cli_run, tiny_policy_dir, tmp_path):
    root = _copy(cli_run[0], tmp_path)
    marker = tmp_path / "MARKER"
    for ckpt in _ckpts(root).glob("step-*"):
        _poison(ckpt, marker)
    proc = _cli(_cli_args(tiny_policy_dir, root, "--ckpt_path", "last", trainer__max_steps=3))
    assert not marker.exists(), "resuming ran code from the checkpoint"
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = _rlforge_lines(proc.stderr)
    assert line.startswith("rlforge: error: ") and "posix.system" in line and "refusing to load" in line
    # A folder named explicitly is refused the same way, in-process.
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_checkpoint(_ckpts(root) / "step-000002")
    assert not marker.exists()


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    torch.save(capture_rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == expected


def test_state_that_weights_only_cannot_load_fails_at_save_naming_its_key():
    assert plain_state({"a": [np.float32(0.5), (1, "x")]}) == {"a": [0.5, (1, "x")]}
    with pytest.raises(CheckpointError, match=r"callbacks\.Mine\.table is a numpy\.ndarray"):
        plain_state({"Mine": {"table": np.zeros(2)}}, "callbacks")


# ------------------------------------------------------------------------- 12: checkpoints per run
def test_each_run_keeps_its_checkpoints_and_last_finds_the_newest(tiny_policy_dir, tmp_path, capsys):
    for max_steps in (1, 2, 3):
        _fit(tiny_policy_dir, tmp_path, max_steps)
    for version in range(3):
        names = sorted(p.name for p in _ckpts(tmp_path, version).glob("step-*"))
        assert names == [f"step-{s:06d}" for s in range(1, version + 2)], version
    assert not (tmp_path / "checkpoints").exists()
    capsys.readouterr()

    resumed = _fit(tiny_policy_dir, tmp_path, 4, ckpt_path="last")
    newest = _ckpts(tmp_path, 2) / "step-000003"
    assert f"rlforge: resuming from {newest} (step 3)" in capsys.readouterr().out
    assert resumed.log_dir == _run_dir(tmp_path, 3)  # a resumed run is a new version, like Lightning
    assert _steps(resumed.log_dir / "metrics.csv") == [1, 2, 3, 4]
    assert resumed.global_step == 4

    out = export_policy(tmp_path, tmp_path / "exported")  # a run root: the newest run's last checkpoint
    final = _ckpts(tmp_path, 3) / "step-000004" / "policy" / "model.safetensors"
    assert _sha(out / "model.safetensors") == _sha(final) != _sha(newest / "policy" / "model.safetensors")


# ---------------------------------------------------------------- 13: damaged checkpoints, durability
def _damage(ckpt: Path, how: str) -> None:
    weights, state = ckpt / "policy" / "model.safetensors", ckpt / "trainer_state.pt"
    if how == "half_weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "garbage_header":
        data = bytearray(weights.read_bytes())
        data[:64] = b"\xff" * 64
        weights.write_bytes(bytes(data))
    elif how == "truncated_state":
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    else:
        state.write_bytes(os.urandom(state.stat().st_size))


DAMAGE = ("half_weights", "garbage_header", "truncated_state", "garbage_state")


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_newest_checkpoint_falls_back_with_one_warning(two_step_run, tiny_policy_dir, tmp_path, how, caplog):
    root = _copy(two_step_run, tmp_path)
    _damage(_ckpts(root) / "step-000002", how)
    with caplog.at_level(logging.WARNING, logger="rlforge"):
        resumed = _fit(tiny_policy_dir, root, 3, ckpt_path="last")
    (warning,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert "\n" not in warning and "step-000002" in warning
    assert warning.endswith(f"resuming from {_ckpts(root) / 'step-000001'}")
    assert resumed.global_step == 3 and _steps(resumed.log_dir / "metrics.csv") == [1, 2, 3]

    with pytest.raises(CheckpointError) as err:  # named explicitly: no fallback, one line
        _fit(tiny_policy_dir, root, 3, ckpt_path=str(_ckpts(root) / "step-000002"))
    assert "\n" not in str(err.value) and "step-000002" in str(err.value)


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_is_found_without_a_manifest_too(two_step_run, tmp_path, how):
    ckpt = _copy(two_step_run, tmp_path) / "rlforge" / "version_0" / "checkpoints" / "step-000002"
    (ckpt / "manifest.json").unlink()  # e.g. a checkpoint copied by hand
    load_checkpoint(ckpt)
    _damage(ckpt, how)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(ckpt)
    assert "\n" not in str(err.value) and str(ckpt) in str(err.value)


@pytest.mark.slow
def test_export_verifies_what_it_copies(cli_run, tmp_path):
    root = _copy(cli_run[0], tmp_path)
    _damage(_ckpts(root) / "step-000002", "half_weights")
    cmd = [sys.executable, "-m", "rlforge.cli", "export"]
    proc = _cli([*cmd, str(_ckpts(root) / "step-000002"), str(tmp_path / "bad")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = _rlforge_lines(proc.stderr)
    assert line.startswith("rlforge: error: ") and "model.safetensors" in line
    assert not (tmp_path / "bad").exists()

    proc = _cli([*cmd, str(root), str(tmp_path / "good")])  # the run root: skips the damaged newest one
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipped damaged checkpoint" in proc.stderr
    good = _ckpts(root) / "step-000001" / "policy" / "model.safetensors"
    assert _sha(tmp_path / "good" / "model.safetensors") == _sha(good)


def test_checkpoint_files_are_fsynced_before_and_after_the_rename(tiny_policy_dir, tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    _fit(tiny_policy_dir, tmp_path, 1)
    ckpt = _ckpts(tmp_path) / "step-000001"
    tmp_prefix = str(_ckpts(tmp_path) / ".step-000001.tmp-")
    for file in (p for p in ckpt.rglob("*") if p.is_file()):
        relative = file.relative_to(ckpt).as_posix()
        assert any(s.startswith(tmp_prefix) and s.endswith("/" + relative) for s in synced), relative
    assert str(_ckpts(tmp_path)) in synced  # the rename itself is made durable
    assert any(s.startswith(str(_ckpts(tmp_path) / ".last.json.")) for s in synced)


@pytest.mark.slow
def test_sigkill_during_save_leaves_an_orphan_the_next_run_removes(tiny_policy_dir, tmp_path):
    killer = "{class_path: tests.trainer.kill_callbacks.KillDuringSave, init_args: {step: 2}}"
    proc = _cli(_cli_args(tiny_policy_dir, tmp_path, callbacks=(killer,)))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert list(_ckpts(tmp_path).glob(".step-000002.tmp-*"))

    proc = _cli(_cli_args(tiny_policy_dir, tmp_path, "--ckpt_path", "last"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"rlforge: resuming from {_ckpts(tmp_path) / 'step-000001'} (step 1)" in proc.stdout
    assert not list(_ckpts(tmp_path).glob(".*tmp*"))


# --------------------------------------------------------------------- 15: unwritable folders, disk full
@pytest.mark.slow
def test_unwritable_run_or_checkpoints_folder_is_one_line_before_step_1(tiny_policy_dir, tmp_path):
    # Tests run as root, which ignores chmod: a folder below a regular file is unwritable for everyone.
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    proc = _cli(_cli_args(tiny_policy_dir, blocker / "runs"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = _rlforge_lines(proc.stderr)
    assert line.startswith("rlforge: error: trainer.default_root_dir: cannot create the run folder")

    ckpt = "{class_path: rlforge.ModelCheckpoint, init_args: {dirpath: " + str(blocker / "ckpts") + "}}"
    args = fast_flags(tiny_policy_dir, tmp_path / "runs") + ["--trainer.callbacks", f"[{ckpt}]"]
    proc = _cli([sys.executable, "-m", "rlforge.cli", "fit", *args])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = _rlforge_lines(proc.stderr)
    assert line.startswith(f"rlforge: error: ModelCheckpoint.dirpath: cannot write checkpoints to {blocker}")
    assert not (_run_dir(tmp_path / "runs") / "metrics.csv").exists()  # stopped before step 1


@pytest.mark.slow
def test_disk_full_during_save_is_one_line_and_keeps_the_last_checkpoint(tiny_policy_dir, tmp_path):
    disk_full = "{class_path: " + CALLBACKS + ".DiskFullAt, init_args: {step: 2}}"
    proc = _cli(_cli_args(tiny_policy_dir, tmp_path, callbacks=(disk_full,), trainer__max_steps=3))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = _rlforge_lines(proc.stderr)[-1]
    kept = _ckpts(tmp_path) / "step-000001"
    assert line.startswith("rlforge: error: saving checkpoint") and "no space left" in line and str(kept) in line
    load_checkpoint(kept)  # intact and verified
    assert sorted(p.name for p in _ckpts(tmp_path).iterdir()) == ["last.json", "step-000001"]
    assert json.loads((_ckpts(tmp_path) / "last.json").read_text())["step"] == 1


# --------------------------------------------------------------------------------------- 16: Ctrl-C


@pytest.mark.slow
def test_run_json_records_git_commit_status_and_duration(cli_run):
    root, proc = cli_run
    manifest = json.loads((_run_dir(root) / "run.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert manifest["git"]["commit"] == head.stdout.strip()
    assert manifest["status"] == "success" and 0 < manifest["duration_s"] < 600 and manifest["ended_at"]
    last = _ckpts(root) / "step-000002"
    assert manifest["last_checkpoint"] == str(last)
    assert proc.stdout.splitlines()[-1].endswith(f"run folder {_run_dir(root)}; last checkpoint {last}")
