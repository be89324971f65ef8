"""rlforge's native CPU kernels for the decode step's attention (``csrc/decode_attention.cpp``), built on first use.

A decode step's attention is a batched GEMV over each row's KV cache; ``torch.bmm`` runs it through MKL's
small-matrix path at a third or less of what a core streams, and at batch 64 that read is about half of a 1-thread
decode step (``benchmarks/bench_decode_floor.py``). The two kernels read it once, as vertical FMAs over contiguous
memory, at 1.5-3x ``torch.bmm``'s rate (``benchmarks/README.md``):

- ``torch.ops.rlforge.decode_scores(q [N, G, D], keys_t [N, D, S], scale) -> [N, G, S]``
- ``torch.ops.rlforge.decode_mix(probs [N, G, S], values [N, S, D]) -> [N, G, D]``

They are registered with the dispatcher and with fake (meta) implementations, so a ``torch.compile``'d decode
step calls them as opaque ops in one graph. The build uses ``torch.utils.cpp_extension`` (a C++ compiler and
ninja) once per machine, torch install and CPU capability (cached under ``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``, ~5 s on 2 cores); when it fails, decoding keeps ``torch.bmm`` and says so once.
``RLFORGE_CPU_KERNELS=0`` (or ``TorchGenerator(cpu_kernels=False)``) skips them.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sys
import time
from pathlib import Path

import torch

from rlforge.generation.switches import env_switch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "decode_attention.cpp"
# The ISA flags of torch's own CPU capability, not -march=native: the build cache is keyed by name and flags, and a
# home directory shared by machines of different CPUs must not hand one a binary built for another.
_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mprefer-vector-width=512"],
    "AVX2": ["-mavx2", "-mfma"],
}
ENV_SWITCH = "RLFORGE_CPU_KERNELS"


def extension_name(capability: str, torch_version: str, torch_dir: Path) -> str:
    """The build's name (and folder under the extensions directory): one per CPU capability and torch install.

    cpp_extension's ``build.ninja`` names the include paths of the torch that builds it, so two environments
    sharing ``~/.cache/torch_extensions`` under one name would rebuild over each other at every switch, relinking
    the library while the other environment's processes load it, or load one built against another torch.
    """
    tag = hashlib.sha1(f"{torch_version}|{torch_dir.resolve()}".encode()).hexdigest()[:10]
    return f"rlforge_decode_attention_{capability.lower()}_{tag}"


@functools.cache
def load_decode_attention() -> bool:
    """Builds (first time on this machine) and loads the decode-attention kernels; whether they are usable.

    Returns ``False``, with one warning, when the build fails (no compiler, no ninja, read-only cache directory);
    ``False`` silently when ``RLFORGE_CPU_KERNELS`` is ``0`` (or ``false``/``off``, read as ``RLFORGE_ONEDNN`` is),
    and with an info line on a platform other than Linux.
    """
    if env_switch(ENV_SWITCH, os.environ.get(ENV_SWITCH)) is False:
        return False
    if not sys.platform.startswith("linux"):
        # The flags are GCC/Clang-on-Linux ones (-fopenmp against torch's libgomp); elsewhere a build would fail in
        # every new process, so it is not tried.
        log.info("rlforge's CPU decode-attention kernels are built on Linux only: decoding attention with torch.bmm")
        return False
    from torch.utils import cpp_extension

    capability = torch.backends.cpu.get_cpu_capability()
    start = time.perf_counter()
    try:
        cpp_extension.load(
            name=extension_name(capability, torch.__version__, Path(torch.__file__).parent),
            sources=[str(SOURCE)],
            # -fopenmp: at::parallel_for is header code over OpenMP, serial without it. libgomp.so.1 resolves to
            # the copy torch already loaded (same soname), so there is one thread pool, as for inductor's kernels.
            extra_cflags=["-O3", "-fopenmp", *_ISA_FLAGS.get(capability, [])],
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as err:  # noqa: BLE001 - any build failure leaves the always-correct torch.bmm path
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        log.warning(
            "could not build rlforge's CPU decode-attention kernels (%s): decoding attention with torch.bmm, "
            "~1.5-2.5x slower on long caches; set %s=0 to skip the build",
            reason,
            ENV_SWITCH,
        )
        return False
    seconds = time.perf_counter() - start
    if seconds > 2.0:
        log.info("built rlforge's CPU decode-attention kernels in %.0f s (cached for later runs)", seconds)
    _register_fakes()
    return True


def _register_fakes() -> None:
    """Shapes of the two ops for ``torch.compile`` (fake tensors; the real ops run only on CPU float32)."""

    @torch.library.register_fake("rlforge::decode_scores")
    def _(q: torch.Tensor, keys_t: torch.Tensor, scale: float) -> torch.Tensor:
        return q.new_empty((q.shape[0], q.shape[1], keys_t.shape[2]))

    @torch.library.register_fake("rlforge::decode_mix")
    def _(probs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return probs.new_empty((probs.shape[0], probs.shape[1], values.shape[2]))
