"""``CompatSlurmJob`` reads ``squeue --json`` of SLURM 22.05 (every job listed, hostlist strings) and of 23.11+.

The recorded outputs below are trimmed to the fields monarch reads; the 22.05 one was recorded from
``squeue --job 2 --json`` on Debian's SLURM 22.05.8 (it lists job 1 too).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

pytest.importorskip("monarch", reason="CompatSlurmJob subclasses monarch's SlurmJob (the `monarch` extra, in `dev`)")

from monarch.job import SlurmJob

from rlforge.strategies.monarch.slurm import CompatSlurmJob, expand_hostlist, find_job, normalize_job

SQUEUE_22_05 = {
    "meta": {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}},
    "errors": [],
    "jobs": [
        {
            "job_id": 1,
            "name": "other",
            "job_state": "COMPLETED",
            "nodes": "cpu7",
            "job_resources": {"nodes": "cpu7", "allocated_cpus": 1, "allocated_hosts": 1},
        },
        {
            "job_id": 2,
            "name": "monarch_job_123",
            "job_state": "RUNNING",
            "nodes": "gpu[01-02]",
            "job_resources": {
                "nodes": "gpu[01-02]",
                "allocated_cpus": 2,
                "allocated_hosts": 2,
                "allocated_nodes": [{"nodename": "gpu01", "cpus_used": 0}, {"nodename": "gpu02", "cpus_used": 0}],
            },
        },
        {"job_id": 3, "name": "queued", "job_state": "PENDING", "nodes": "", "state_reason": "Resources"},
    ],
}

SQUEUE_23_11 = {
    "meta": {"plugin": {"type": "openapi/v0.0.40"}, "slurm": {"release": "23.11.4"}},
    "errors": [],
    "warnings": [],
    "jobs": [
        {
            "job_id": 2,
            "name": "monarch_job_123",
            "job_state": ["RUNNING"],
            "nodes": "gpu[01-02]",
            "node_count": {"set": True, "infinite": False, "number": 2},
            "job_resources": {
                "nodes": {
                    "count": 2,
                    "select_type": ["AVAILABLE"],
                    "list": "gpu[01-02]",
                    "whole": False,
                    "allocation": [{"index": 0, "name": "gpu01"}, {"index": 1, "name": "gpu02"}],
                },
                "cpus": 2,
            },
        }
    ],
}

HOSTLISTS = {"gpu[01-02]": ["gpu01", "gpu02"], "cpu7": ["cpu7"]}


@pytest.fixture()
def fake_slurm(monkeypatch):
    """Answers ``squeue --json`` with the recorded output in ``output["squeue"]`` and ``scontrol show hostnames``
    from ``HOSTLISTS``; records every command."""
    output: dict = {"squeue": SQUEUE_22_05, "calls": []}

    def run(argv, **kwargs):
        output["calls"].append(list(argv))
        if argv[:1] == ["squeue"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps(output["squeue"]), "")
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return subprocess.CompletedProcess(argv, 0, "\n".join(HOSTLISTS[argv[3]]) + "\n", "")
        raise AssertionError(f"unexpected command {argv}")

    monkeypatch.setattr(subprocess, "run", run)
    return output


def _job(cls: type) -> SlurmJob:
    # Without __init__: SlurmJob.__init__ switches this process's Monarch transport to TCP, which would leak
    # into the other Monarch tests; the parsing methods need no instance state.
    return cls.__new__(cls)


def test_monarch_slurm_job_reads_another_job_on_22_05(fake_slurm):
    # The bug the adapter exists for: job 2 was asked for, monarch takes jobs[0] (job 1, COMPLETED).
    job = _job(SlurmJob)
    assert job._get_job_info_json("2")["job_id"] == 1
    # Even listed first, a running 22.05 job's hosts are a hostlist string, not `nodes.allocation`.
    fake_slurm["squeue"] = {"jobs": SQUEUE_22_05["jobs"][1:]}
    job._kill = lambda: None  # monarch cancels the job when the start fails
    with pytest.raises(AttributeError, match="'str' object has no attribute 'get'"):
        job._wait_for_job_start("2", 2, timeout=5)


def test_compat_job_picks_its_job_and_expands_the_hostlist_on_22_05(fake_slurm):
    job = _job(CompatSlurmJob)
    info = job._get_job_info_json("2")
    assert info["job_id"] == 2 and info["job_state"] == ["RUNNING"]
    assert job._wait_for_job_start("2", 2, timeout=5) == ["gpu01", "gpu02"]
    assert ["squeue", "--job", "2", "--json"] in fake_slurm["calls"]
    assert ["scontrol", "show", "hostnames", "gpu[01-02]"] in fake_slurm["calls"]
    assert job._get_job_info_json("1")["job_state"] == ["COMPLETED"]  # a finished job reads as terminal
    pending = job._get_job_info_json("3")
    assert pending["job_state"] == ["PENDING"] and "job_resources" not in pending
    assert job._get_job_info_json("4") is None  # purged: not listed


def test_compat_job_reads_the_23_11_schema_like_monarch(fake_slurm):
    fake_slurm["squeue"] = SQUEUE_23_11
    assert _job(CompatSlurmJob)._get_job_info_json("2") == _job(SlurmJob)._get_job_info_json("2")
    assert _job(CompatSlurmJob)._wait_for_job_start("2", 2, timeout=5) == ["gpu01", "gpu02"]
    assert not any(call[0] == "scontrol" for call in fake_slurm["calls"])


def test_find_and_normalize_are_pure_on_recorded_output():
    assert find_job(SQUEUE_22_05, "3")["name"] == "queued"
    assert find_job(SQUEUE_23_11, 2)["name"] == "monarch_job_123"
    assert find_job({"jobs": [{"job_id": {"set": True, "number": 7}}]}, "7") == {"job_id": {"set": True, "number": 7}}
    assert find_job({"errors": []}, "2") is None
    job = SQUEUE_22_05["jobs"][1]
    normalized = normalize_job(job, expand=HOSTLISTS.__getitem__)
    assert normalized["job_resources"]["nodes"] == {
        "list": "gpu[01-02]",
        "allocation": [{"name": "gpu01"}, {"name": "gpu02"}],
    }
    assert normalized["job_resources"]["allocated_cpus"] == 2
    assert job["job_resources"]["nodes"] == "gpu[01-02]"  # the input is not modified


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed (apt-get install slurm-client)")
def test_expand_hostlist_uses_scontrol(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"  # scontrol reads a config even to expand names; it contacts no daemon here
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost\nPartitionName=p Nodes=ALL\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert expand_hostlist("gpu[01-03],cpu7") == ["gpu01", "gpu02", "gpu03", "cpu7"]
    assert expand_hostlist("node[8-10]") == ["node8", "node9", "node10"]
    assert expand_hostlist("") == []
