"""``CompatSlurmJob``: monarch's ``SlurmJob`` reading ``squeue --json`` as SLURM 22.05-23.02 writes it.

Monarch 0.7 expects the newer schema (SLURM 23.11+): ``squeue --job N`` lists only job N, ``job_state`` is a list
and ``job_resources.nodes.allocation`` lists the hosts. SLURM 22.05 ignores ``--job`` with ``--json`` (every job
is listed, so ``jobs[0]`` may be another job, e.g. one that finished), gives ``job_state`` as a string and
``job_resources.nodes`` as a hostlist string such as ``gpu[01-04]``. This module picks the job by ``job_id``
and rewrites the old fields into the new shape; everything else is monarch's.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from typing import Any

from monarch.job import SlurmJob

log = logging.getLogger(__name__)


def expand_hostlist(hostlist: str) -> list[str]:
    """``gpu[01-02],cpu7`` -> ``["gpu01", "gpu02", "cpu7"]``, as SLURM itself expands it (``scontrol``)."""
    if not hostlist:
        return []
    out = subprocess.run(
        ["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True, timeout=30
    )
    return out.stdout.split()


def _number(value: Any) -> Any:
    """SLURM 23.11+ wraps some numbers as ``{"set": true, "number": N}``."""
    return value.get("number") if isinstance(value, dict) else value


def find_job(squeue: dict[str, Any], job_id: str | int) -> dict[str, Any] | None:
    """The entry of ``job_id`` in ``squeue --json`` output, or ``None`` when it is not listed."""
    return next((job for job in squeue.get("jobs", []) if str(_number(job.get("job_id"))) == str(job_id)), None)


def normalize_job(job: dict[str, Any], expand: Callable[[str], list[str]] = expand_hostlist) -> dict[str, Any]:
    """``job`` with the fields monarch reads in the 23.11+ shape: ``job_state`` a list, and
    ``job_resources.nodes.allocation`` a list of ``{"name": host}``. Entries already in that shape pass unchanged.

    Args:
        job: One entry of ``squeue --json``'s ``jobs``.
        expand: Expands a SLURM hostlist expression into host names.
    """
    job = dict(job)
    if isinstance(job.get("job_state"), str):
        job["job_state"] = [job["job_state"]]
    resources = job.get("job_resources")
    if isinstance(resources, dict) and isinstance(resources.get("nodes"), str):
        hostlist = resources["nodes"]
        nodes = {"list": hostlist, "allocation": [{"name": host} for host in expand(hostlist)]}
        job["job_resources"] = {**resources, "nodes": nodes}
    return job


class CompatSlurmJob(SlurmJob):
    """Monarch's ``SlurmJob`` that also understands SLURM 22.05-23.02's ``squeue --json``.

    Only the ``squeue`` parsing differs (see the module docstring); submission, attaching and cancelling are
    monarch's. Remove once monarch's SlurmJob parses SLURM 22.05-23.02 (monarch 0.7).
    """

    def _get_job_info_json(self, job_id: str) -> dict[str, Any] | None:
        try:
            result = subprocess.run(
                ["squeue", "--job", str(job_id), "--json"], capture_output=True, text=True, check=True, timeout=60
            )
            job = find_job(json.loads(result.stdout), job_id) if result.stdout.strip() else None
            return normalize_job(job) if job is not None else None
        except subprocess.CalledProcessError as err:  # e.g. "Invalid job id specified" once the job is purged
            log.warning("squeue --job %s: %s", job_id, err.stderr.strip())
        except subprocess.TimeoutExpired:
            log.warning("squeue --job %s: no answer within 60 s", job_id)
        except json.JSONDecodeError as err:
            log.warning("squeue --job %s --json: unreadable output (%s)", job_id, err)
        return None
