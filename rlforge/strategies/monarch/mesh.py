"""Monarch plumbing of ``MonarchStrategy``: spawning replicas, bounded waits, error translation.

Every wait on an actor goes through :func:`wait`, which has a time limit and turns Monarch's errors into
rlforge's: an endpoint that raised becomes :class:`~rlforge.errors.WorkerError` (with the actor's
traceback), a dead process :class:`~rlforge.errors.WorkerDiedError`, no answer in time a ``WorkerError``.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from rlforge.errors import WorkerDiedError, WorkerError
from rlforge.strategies.monarch.config import ServiceConfig

log = logging.getLogger(__name__)

SUPERVISION_POLL_ENV = "HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY"
"""Monarch polls process health this often (default ~10 s); rlforge lowers it so deaths show in seconds."""
SUPERVISION_POLL = "1s"


def prepare_environment() -> None:
    """Must run before monarch is imported: faster death detection (unless the user set it)."""
    os.environ.setdefault(SUPERVISION_POLL_ENV, SUPERVISION_POLL)


def bootstrap_command() -> Any:
    """Monarch's default child command plus this interpreter's ``sys.path`` (children import rlforge
    and user modules, e.g. reward functions, from wherever the driver found them: pytest, the CLI's cwd)."""
    from monarch.actor import default_bootstrap_cmd

    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), SUPERVISION_POLL_ENV: os.environ[SUPERVISION_POLL_ENV]}
    # Idle OpenMP threads of a worker must sleep, not spin: on a shared CPU host they would steal the
    # trainer's cores between requests (measured: ~8 s instead of ~0.3 s per step on 2 busy cores).
    env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    return default_bootstrap_cmd().with_env(env)


@dataclass
class Replica:
    """One replica of a role: its proc mesh and the actor mesh on it."""

    name: str
    index: int
    procs: Any
    actor: Any
    restarts: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def spawn_replica(
    host_mesh: Any, cfg: ServiceConfig, name: str, index: int, actor_cls: type, *args: Any, **kwargs: Any
) -> Replica:
    """Spawns ``cfg.procs`` processes on ``host_mesh`` and the actor on them (does not wait)."""
    procs = host_mesh.spawn_procs(per_host=cfg.per_host, name=f"{name}{index}", bootstrap_command=bootstrap_command())
    actor = procs.spawn(name, actor_cls, *args, **kwargs)
    return Replica(name=name, index=index, procs=procs, actor=actor)


def stop_replica(replica: Replica, timeout_s: float = 10.0) -> None:
    """Stops the replica's processes (best effort: a dead mesh may refuse)."""
    try:
        replica.procs.stop().get(timeout=timeout_s)
    except Exception as err:  # already dead or unreachable: nothing left to release
        log.debug("stopping %s%d: %s", replica.name, replica.index, err)


def _supervision_error() -> type[BaseException]:
    try:
        from monarch._rust_bindings.monarch_hyperactor.supervision import SupervisionError
    except ImportError:  # older/newer layout: fall back to the base class it derives from
        return RuntimeError
    return SupervisionError


def wait(future: Any, what: str, timeout_s: float) -> Any:
    """``future.get`` with a time limit, translating Monarch errors (see the module docstring).

    Args:
        future: A Monarch ``Future``.
        what: Names the call in messages, e.g. ``generator replica 0: generate``.
        timeout_s: Seconds to wait.
    """
    from monarch.actor import ActorError

    try:
        return future.get(timeout=timeout_s)
    except ActorError as err:
        text = str(err)
        last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), type(err).__name__)
        raise WorkerError(f"{what} raised {last}\nRemote traceback:\n{text}") from err
    except TimeoutError as err:
        raise WorkerError(
            f"{what}: no answer within trainer.strategy.timeout_s={timeout_s:g} s (raise it for big models)"
        ) from err
    except _supervision_error() as err:
        cause = " ".join(str(err).split())
        marker = "failed: "
        cause = cause[cause.rfind(marker) + len(marker) :] if marker in cause else cause
        raise WorkerDiedError(f"{what}: the worker process died ({cause})") from err


class FaultHook:
    """Replaces ``monarch.actor.unhandled_fault_hook`` (which exits the driver) while a strategy runs.

    Failures are recorded and reach the trainer through :func:`wait` on the next call to the dead actor.
    """

    def __init__(self) -> None:
        self.failures: list[str] = []
        self._previous: Any = None

    def __call__(self, failure: Any) -> None:
        line = " ".join(str(failure).split())
        self.failures.append(line)
        log.warning("monarch: %s", line[:300])

    def install(self) -> None:
        import monarch.actor

        self._previous = monarch.actor.unhandled_fault_hook
        monarch.actor.unhandled_fault_hook = self

    def uninstall(self) -> None:
        import monarch.actor

        if self._previous is not None and monarch.actor.unhandled_fault_hook is self:
            monarch.actor.unhandled_fault_hook = self._previous
