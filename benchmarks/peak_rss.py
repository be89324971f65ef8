"""The peak resident memory of a command, measured in a child that does not inherit this process's peak.

Linux carries a process's peak RSS across ``exec`` (``exec_mmap`` folds the old address space's high-water mark
into the new program's), and ``subprocess`` spawns with ``vfork``, whose old address space is the parent's. So a
child's ``ru_maxrss`` is at least its parent's peak: a bare ``python -c pass`` launched from a process that once held
1.2 GB reported 1365 MiB. The command is therefore started by a small launcher (a Python without torch, ~12 MiB),
whose own ``wait4`` reads the command's peak.
"""

from __future__ import annotations

import os
import subprocess
import sys

# Runs the command (argv[1:]) with stdout discarded, then prints its ru_maxrss (KiB) and exits with its status.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def peak_rss_mb(cmd: list[str], **popen_kwargs) -> float:
    """Peak RSS (MiB) of ``cmd`` run to completion (its stdout discarded, its stderr in the error on failure).

    ``popen_kwargs`` (``cwd``, ``env``) go to the launcher, which passes them on. Raises ``CalledProcessError``
    when ``cmd`` fails. The peak is ``cmd``'s own process; children it waited for count too (``RUSAGE_CHILDREN``
    semantics of ``wait4``), so inductor's compile workers would.
    """
    if not hasattr(os, "wait4"):
        raise RuntimeError("peak RSS is read with os.wait4, which this platform lacks (Linux and macOS have it)")
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, text=True, check=False, **popen_kwargs
    )
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, cmd, stderr=done.stderr[-2000:])
    return int(done.stdout.split()[-1]) / 1024  # Linux reports KiB
