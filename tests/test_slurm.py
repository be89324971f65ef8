"""rlforge on a real (one-node) SLURM cluster: ``srun`` ranks as one data-parallel run, and the Monarch launcher's
generator inside a SLURM allocation. The cluster comes from ``tests/slurm_cluster.py`` (skipped without SLURM)."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fast_flags, free_port, metric_rows
from tests.slurm_cluster import slurm_cluster

REPO = Path(__file__).resolve().parents[1]
SBATCH_EXAMPLE = REPO / "scripts" / "slurm" / "grpo.sbatch"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """One cluster for the module's tests (it starts in about a second; the tests' jobs do not overlap)."""
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def _env(cluster: dict[str, str], **extra: str) -> dict[str, str]:
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # A rank that aborts in C++ (one CI run: "terminate called without an active exception" in rank 1 after a
    # successful run, not reproduced in 46 runs since) prints every thread's Python stack into the job output.
    return {**cluster, **offline, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1", **extra}


def _steps(metrics_csv: Path) -> list[int]:
    with open(metrics_csv) as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]


@pytest.mark.slow
def test_srun_with_two_ranks_trains_one_run(cluster, tiny_policy_dir, tmp_path):
    runs = tmp_path / "runs"
    checkpoint = "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}]"
    flags = fast_flags(tiny_policy_dir, runs, trainer__max_steps=3) + ["--trainer.callbacks", checkpoint]
    fit = shlex.join(["srun", "--kill-on-bad-exit=1", sys.executable, "-m", "rlforge", "fit", *flags])
    log = tmp_path / "job.out"
    env = _env(cluster, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    cmd = ["sbatch", "--wait", "-n", "2", f"--output={log}", "--wrap", fit]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = log.read_text() if log.exists() else "(no job output)"
    assert proc.returncode == 0, f"sbatch --wait: {proc.returncode}\n{proc.stderr[-2000:]}\n{output[-4000:]}"

    # One run of two ranks, not two runs: one run folder, written once.
    assert [p.name for p in runs.iterdir()] == ["rlforge"], output[-3000:]
    assert [p.name for p in (runs / "rlforge").iterdir()] == ["version_0"], output[-3000:]
    run = runs / "rlforge" / "version_0"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "success" and manifest["world_size"] == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "last.json",
        "step-000001",
        "step-000002",
        "step-000003",
    ]
    assert _steps(run / "metrics.csv") == [1, 2, 3]


@pytest.mark.slow
def test_monarch_launcher_runs_the_generator_in_a_slurm_job(cluster, tiny_policy_dir, tmp_path):
    where = tmp_path / "generator_env.json"
    recorder = f"[{{class_path: tests.slurm_cluster.RecordGeneratorEnvironment, init_args: {{path: {where}}}}}]"
    flags = fast_flags(tiny_policy_dir, tmp_path / "runs", trainer__max_steps=3) + ["--trainer.callbacks", recorder]
    cmd = [
        sys.executable, str(REPO / "scripts" / "launch_monarch.py"), "--scheduler", "slurm", "--generators", "1",
        "--job-file", str(tmp_path / "job" / "job.pkl"), "--monarch-port", str(free_port()),
        "--job-start-timeout", "60", "--bind-address", "127.0.0.1", "--", *flags,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(cluster), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"launch_monarch.py: {proc.returncode}\n{proc.stderr[-5000:]}"
    assert [int(r["step"]) for r in metric_rows(tmp_path / "runs")] == [1, 2, 3]

    job_id = re.search(r"SLURM job (\d+) submitted", proc.stderr).group(1)
    generators = json.loads(where.read_text())
    assert len(generators) == 1, generators  # one replica, and it ran inside the launcher's SLURM job
    assert [env["SLURM_JOB_ID"] for env in generators.values()] == [job_id]
    assert re.search(rf"Cancelled SLURM job {job_id}\b", proc.stderr)  # released when `rlforge fit` ended
    worker_logs = list((tmp_path / "job").glob(f"slurm_{job_id}_*.out"))
    assert worker_logs, "the workers' SLURM log belongs next to the job file, not in the working directory"


def test_sbatch_example_is_valid_bash_and_runs_rlforge_fit():
    subprocess.run(["bash", "-n", str(SBATCH_EXAMPLE)], check=True, timeout=30)
    text = SBATCH_EXAMPLE.read_text()
    srun = [line for line in text.splitlines() if line.strip().startswith("srun ")]
    assert len(srun) == 1 and re.match(r"srun (.* )?rlforge fit ", srun[0].strip()), srun
    assert "--kill-on-bad-exit=1" in srun[0]  # one failed rank ends the job, not the rendezvous timeout
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=?(\S*)", text, re.MULTILINE))
    assert directives["nodes"] == "2" and directives["ntasks-per-node"] == "8"
    assert directives["gpus-per-task"] == "1"  # a rank's vLLM engine takes the first GPU it sees
    assert {"cpus-per-task", "time"} <= set(directives)
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in text
    # MASTER_PORT stays below Linux's ephemeral range (32768+), where srun's own sockets could take it first.
    (port_line,) = [line for line in text.splitlines() if line.startswith("export MASTER_PORT=")]
    for job_id in (1, 12345, 19999, 31999, 987654321):
        env = {"PATH": os.defpath, "SLURM_JOB_ID": str(job_id)}
        cmd = ["bash", "-c", f"{port_line}; echo $MASTER_PORT"]
        port = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        assert 1024 <= int(port.stdout) < 32768, (job_id, port.stdout, port.stderr)
