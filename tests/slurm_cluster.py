"""A real one-node SLURM cluster for tests: munged, slurmctld and slurmd on 127.0.0.1, all state in temp folders.

``slurm_cluster(root)`` writes a ``slurm.conf`` for this host, starts a private ``munged`` (its own key and socket,
so a system munged is neither needed nor touched) and both SLURM daemons in the foreground, waits until ``sinfo``
shows the node idle and yields the environment (``SLURM_CONF`` ...) that ``sbatch``/``srun``/``squeue`` need. On
exit it cancels what is still queued and stops every daemon by the pid in its pid file, checking that it is gone.

Needs root (``SlurmUser=root``; ``munged`` runs as the ``munge`` user) and Debian's ``slurmctld slurmd slurm-client
munge`` packages (SLURM 22.05); without them the test is skipped with the install command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlforge import Callback
from tests.helpers import free_port

BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "munged")
SKIP_REASON = (
    "SLURM binaries (slurmctld, slurmd, srun, munged) not installed: "
    "apt-get install slurmctld slurmd slurm-client munge"
)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# The daemons live in /usr/sbin, which a non-login PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])


def require_slurm() -> None:
    """Skips the calling test unless the SLURM and MUNGE binaries are installed and we are root."""
    if any(shutil.which(name, path=SEARCH_PATH) is None for name in BINARIES):
        pytest.skip(SKIP_REASON)
    if os.geteuid() != 0:
        pytest.skip("the test SLURM cluster runs its daemons as root (SlurmUser=root); run the tests as root")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as err:
        return f"({path}: {err.strerror})"
    return "\n".join(text) or f"({path} is empty)"


class _Daemon:
    """A daemon started in the foreground; its pid file, log and captured stdout/stderr."""

    def __init__(self, name: str, argv: list[str], pid_file: Path, log_file: Path, env: dict[str, str], **popen):
        self.name, self.pid_file, self.log_file = name, pid_file, log_file
        self.out_file = log_file.with_suffix(".stdout")
        with open(self.out_file, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, **popen)

    def logs(self) -> str:
        return f"--- {self.log_file} (tail) ---\n{_tail(self.log_file)}\n--- {self.out_file} (tail) ---\n" + _tail(
            self.out_file
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode} while starting\n{self.logs()}")

    def wait_for_pid_file(self, deadline: float) -> None:
        while not self.pid_file.is_file() or not self.pid_file.read_text().strip():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} wrote no pid file {self.pid_file} in time\n{self.logs()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM to the pid in the pid file (SIGKILL after a grace period); raises if it is still alive."""
        pids = {self.proc.pid}
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(self.pid_file.read_text().split()[0]))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(_alive(pid, self.proc) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid, self.proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        still = [pid for pid in pids if _alive(pid, self.proc)]
        if still:
            raise RuntimeError(f"{self.name} (pid {still}) is still running after SIGTERM and SIGKILL")


def _alive(pid: int, proc: subprocess.Popen) -> bool:
    if pid == proc.pid:
        return proc.poll() is None  # reaps our own child, so it cannot linger as a zombie
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def write_munge_key(folder: Path) -> Path:
    """1024 random bytes, owner ``munge``, mode 400 (munged refuses keys others can read)."""
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    return key


def write_slurm_conf(root: Path, run_dir: Path, munge_socket: Path) -> Path:
    """A ``slurm.conf`` for this host only: every path under ``root``/``run_dir``, random ports, 127.0.0.1."""
    host = socket.gethostname().split(".")[0]
    spool, state = run_dir / "spool", root / "state"
    for folder in (spool, state):
        folder.mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=rlforge-test",
                f"SlurmctldHost={host}(127.0.0.1)",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={munge_socket}",
                # Bind to the address this host resolves to (127.0.0.1), not every address.
                "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                f"StateSaveLocation={state}",
                f"SlurmdSpoolDir={spool}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                # slurmd may detect fewer CPUs than configured (cgroup limits); trust the configured count.
                "SlurmdParameters=config_overrides",
                "ReturnToService=2",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                # A line per finished job (id, name, state, nodes): the record tests check instead of sacct.
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={root / 'jobcomp.txt'}",
                "KillWait=5",
                "MinJobAge=300",
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                # `nproc` follows OMP_NUM_THREADS; --all counts the machine's CPUs.
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


def _node_state(env: dict[str, str]) -> str:
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "(sinfo timed out)"
    return out.stdout.strip() or out.stderr.strip()


def _cancel_all(env: dict[str, str]) -> None:
    """Cancels every job and waits (bounded) until the queue is empty, so no slurmstepd outlives the daemons."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=10)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(0.5)


@contextlib.contextmanager
def slurm_cluster(root: Path | str) -> Iterator[dict[str, str]]:
    """Runs a one-node SLURM cluster; yields the environment for ``sbatch``/``srun`` subprocesses.

    Args:
        root: Folder for ``slurm.conf``, state and logs (kept afterwards for debugging). Sockets and spool go
            to a short folder under the system temp dir (UNIX socket paths are limited to 108 bytes).
    """
    require_slurm()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="rlf-slurm-"))
    run_dir.chmod(0o755)  # munged runs as `munge` and must reach its folder inside
    munge_dir = run_dir / "munge"
    munge_dir.mkdir()
    shutil.chown(munge_dir, "munge", "munge")
    munge_dir.chmod(0o755)  # munged checks the ownership of its socket, key and pid folder
    key = write_munge_key(munge_dir)
    munge_socket = munge_dir / "munge.socket"
    conf = write_slurm_conf(root, run_dir, munge_socket)
    env = {**os.environ, "PATH": SEARCH_PATH, "SLURM_CONF": str(conf)}
    daemons: list[_Daemon] = []
    up = False
    try:
        munged = _Daemon(
            "munged",
            ["munged", "--foreground", "--force", f"--socket={munge_socket}", f"--key-file={key}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            munge_dir / "munged.pid", munge_dir / "munged.log", env, user="munge", group="munge",
        )  # fmt: skip
        daemons.append(munged)
        deadline = time.monotonic() + START_TIMEOUT_S
        munged.wait_for_pid_file(deadline)
        while not munge_socket.exists():
            munged.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged created no socket {munge_socket} in time\n{munged.logs()}")
            time.sleep(0.1)
        for name in ("slurmctld", "slurmd"):
            daemon = _Daemon(name, [name, "-D", "-f", str(conf)], root / f"{name}.pid", root / f"{name}.log", env)
            daemons.append(daemon)
            daemon.wait_for_pid_file(deadline)
        state = ""
        while state != "idle":
            for daemon in daemons:
                daemon.check_alive()
            if time.monotonic() > deadline:
                logs = "\n".join(d.logs() for d in daemons)
                raise RuntimeError(
                    f"the SLURM node did not become idle within {START_TIMEOUT_S:g} s (sinfo: {state!r})\n{logs}"
                )
            time.sleep(0.3)
            state = _node_state(env)
        up = True
        yield env
    finally:
        errors = []
        if up:
            _cancel_all(env)
        for daemon in reversed(daemons):  # slurmd, slurmctld, then munged (they authenticate through it)
            try:
                daemon.stop()
            except RuntimeError as err:
                errors.append(str(err))
        shutil.rmtree(run_dir, ignore_errors=True)
        if errors:
            raise RuntimeError("; ".join(errors))


class RecordGeneratorEnvironment(Callback):
    """A callback (``--trainer.callbacks``) writing each generator process's SLURM variables to ``path`` as JSON,
    read from ``/proc/<pid>/environ``: proof that the generator runs inside the SLURM job (one host only)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer, module) -> None:
        found = {}
        for pid in trainer.strategy.generator_pids():
            with open(f"/proc/{pid}/environ", "rb") as f:
                pairs = (item.decode(errors="replace").partition("=") for item in f.read().split(b"\0") if item)
                found[pid] = {key: value for key, _, value in pairs if key.startswith("SLURM_")}
        Path(self.path).write_text(json.dumps(found))
