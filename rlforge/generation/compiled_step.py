"""When to run a step function (the decode step, the packed training layers) through ``torch.compile``, and the
clean fall back to eager when it fails.

Compiling pays only over many steps: on a 2-core CPU inductor spends ~30 s on the first graph of a small
Qwen3 (~4 s when its on-disk cache already holds it), while one eager ``generate`` of 64 x 128 tokens takes
~1.5 s. ``"auto"`` therefore follows the ski-rental rule: decode eagerly until the eager decode time of this
generator reaches ``compile_after_s`` (about twice a cold compile), then compile. A short run never pays the
compile; a long one pays at most about what it already spent eagerly, and then decodes faster.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rlforge.errors import ConfigError

log = logging.getLogger(__name__)


def is_compile_mode(value: object) -> bool:
    """Whether ``value`` is a ``compile`` setting: ``True``, ``False`` or ``"auto"`` (not ``1`` or ``"true"``)."""
    return isinstance(value, bool) or value == "auto"


class CompiledStep:
    """Runs ``fn`` eagerly or compiled (``fullgraph=True``; with ``dynamic=False`` one graph per static shape and
    sampling config, sizes the caller marks dynamic aside; one graph for all sizes when ``dynamic=True``).

    Args:
        fn: The step function; no host syncs (a graph break would fail ``fullgraph``).
        compile: ``True`` compiles from the first call, ``False`` never, ``"auto"`` after ``compile_after_s``.
        compile_after_s: Eager decode seconds after which ``"auto"`` compiles.
        dynamic: Compile with symbolic sizes (the packed training layers, whose token count changes every step).
        name: What ``fn`` is, for the fall-back warning.
        options: Inductor options for this compile only (``torch.compile(options=...)``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        compile: bool | str = "auto",
        compile_after_s: float = 60.0,
        *,
        dynamic: bool = False,
        name: str = "the decode step",
        options: dict[str, Any] | None = None,
    ) -> None:
        if not is_compile_mode(compile):
            raise ConfigError(f"generator compile must be true, false or 'auto', got {compile!r}")
        self.fn = fn
        self.mode = compile
        self.compile_after_s = compile_after_s
        self.dynamic, self.name, self.options = dynamic, name, options
        self.eager_s = 0.0  # wall time of eager decodes so far (what "auto" weighs against a compile)
        self.failed = False
        self._compiled: Callable[..., Any] | None = None

    @property
    def active(self) -> bool:
        """Whether the next decode runs compiled."""
        if self.failed or self.mode is False:
            return False
        return self.mode is True or self.eager_s >= self.compile_after_s

    def record_eager(self, seconds: float) -> None:
        """Adds the wall time of one eager decode (``"auto"`` compiles once the sum passes the threshold)."""
        self.eager_s += seconds

    def __call__(self, *args: Any) -> Any:
        if not self.active:
            return self.fn(*args)
        try:
            if self._compiled is None:
                if self.mode == "auto":  # a pause of up to ~30 s in the middle of a run deserves a line
                    log.warning(
                        "compiling %s after %.0f s of eager decoding (generator compile: auto): a one-time pause "
                        "(~30 s on a 2-core CPU, a few s with a warm inductor cache), faster decodes after it; "
                        "generator_options {compile: false} keeps it eager",
                        self.name,
                        self.eager_s,
                    )
                self._compiled = torch.compile(self.fn, dynamic=self.dynamic, fullgraph=True, options=self.options)
            return self._compiled(*args)
        except Exception as err:  # noqa: BLE001 - no compiler, unsupported op, ...: eager is always correct
            log.warning("torch.compile of %s failed (%s); running it eagerly from now on", self.name, err)
            self.failed = True
            # A step is a pure function of its arguments apart from writes it repeats exactly (the decode step's
            # own cache column), so running it again eagerly is exact.
            return self.fn(*args)

    @contextlib.contextmanager
    def reusing_graph(self) -> Iterator[None]:
        """Calls inside run the graph the previous call ran, checking only the guards that tell cached graphs apart.

        For the decode steps after a generation's first: their only changing size is marked dynamic, so they can
        never need another graph (``tests/generation/test_compiled_decode.py`` checks that none recompiles), and
        dynamo's guards on every weight of the model are ~0.3 ms a step that decide nothing. The first step of
        each generation still runs every guard, which picks the graph for its batch and sampling settings.
        The stance is process-wide: compiled code another thread runs meanwhile skips its guards too (rlforge's
        own threads, reward scoring and environments, run none). Under a stance other than ``"default"`` (e.g. a
        user's ``force_eager``) guards are kept and the stance left alone.
        """
        # torch 2.13 has no public getter for the current stance.
        stance = getattr(getattr(torch._dynamo.eval_frame, "_stance", None), "stance", None)
        if not self.active or self._compiled is None or stance != "default":
            yield
            return
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            yield

    def timed(self) -> _EagerTimer:
        """Context manager that records the wall time of a decode when it ran eagerly."""
        return _EagerTimer(self)


_SHARED: dict[tuple[Callable[..., Any], str], CompiledStep] = {}


def shared_step(fn: Callable[..., Any], device: torch.device, name: str) -> CompiledStep:
    """The one ``CompiledStep(fn, True, dynamic=True)`` of ``fn`` on ``device``'s type, shared by every caller:
    dynamo caches graphs per function, and after a failed compile every later call runs eagerly without retrying.

    On CPU the graphs' kernels are called from C++ instead of inductor's Python wrapper (``cpp_wrapper``, as the
    decode step's are): 3-6 ms off a ~130 ms update of the bench's GRPO step (the packed layers' 8 graph calls,
    forward and backward), for a longer first compile. Elsewhere the Python wrapper stays.
    """
    key = (fn, device.type)
    if key not in _SHARED:
        options = {"cpp_wrapper": True} if device.type == "cpu" else None
        _SHARED[key] = CompiledStep(fn, True, dynamic=True, name=name, options=options)
    return _SHARED[key]


class _EagerTimer:
    def __init__(self, step: CompiledStep) -> None:
        self.step = step

    def __enter__(self) -> None:
        self.eager = not self.step.active
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if self.eager and exc[0] is None:
            self.step.record_eager(time.perf_counter() - self.start)
