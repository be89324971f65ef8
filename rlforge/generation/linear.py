"""fp32 projections through oneDNN on x86-64 CPUs, forward and backward.

PyTorch's CPU ``mm``/``addmm`` call MKL, which on AMD processors takes its AVX2 kernels even where the core has
AVX-512: ~108 GFLOP/s on one Zen 5 core at a small policy's shapes. oneDNN's inner product
(``torch.ops.mkldnn._linear_pointwise``, the op inductor itself emits for frozen CPU linears) picks its kernels by
the ISA the core reports and ran 220-250 GFLOP/s there (``benchmarks/bench_linear.py``). ``linear`` and
``linear_add`` run a projection's forward and both backward GEMMs through it: an ``autograd.Function`` whose
pieces are ordinary ops, so ``torch.compile`` traces it like any other.

oneDNN builds (JIT-compiles) a primitive per shape, ~1-2 ms each on first use, and caches up to 1024 of them at
~0.7 MB each (measured): fed every row count a training run produces, it spent that time every step and grew by
hundreds of MB. So it only sees row counts from a small fixed set, ``padded_rows``' buckets: a concrete count must
be one (a decode step's batch of 64 is), a symbolic one (a compiled graph's) must be a provable multiple of
``ROW_ALIGN``, which the packed training forward asserts (``torch._check``) after padding its stream to a bucket.

Only where that is the trade: on Intel cores MKL runs its AVX-512 kernels, and oneDNN was 0.62-0.98x its speed
at the same shapes (a Xeon with AVX-512 and AMX, ``bench_linear.py``). Zen 4 (AMD family 25) runs AVX-512 on 256-bit
datapaths, so MKL's AVX2 kernels lose nothing there: oneDNN was 0.93-1.10x MKL per product, and a compiled GRPO step
of the default policy's architecture was 8% faster with MKL (its decode products, 64 rows, lost ~15% in oneDNN). So by
default oneDNN takes the products on AMD CPUs with AVX-512 from family 26 (Zen 5) on only (``default_preference``);
``RLFORGE_ONEDNN=1`` / ``0`` in the environment forces it on / off for a process, and
``onednn_projections(True / False)`` for a block of code.

Everything else takes ``F.linear``/``torch.addmm``: other row counts, products under ~1M multiply-adds, other
devices, dtypes and tensor subclasses, CPU autocast (its casts belong to ``F.linear``), biases on the residual
path, non-x86 CPUs, and ``torch.backends.mkldnn.enabled = False`` (PyTorch's own switch, e.g. ``with
torch.backends.mkldnn.flags(enabled=False):``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

from rlforge.generation.switches import env_switch

# x86-64 only: elsewhere oneDNN rides on other GEMM libraries, and nothing here measured it against them.
_ONEDNN = torch.backends.mkldnn.is_available() and platform.machine().lower() in {"x86_64", "amd64"}
_SWITCH = "RLFORGE_ONEDNN"
# AMD Zen 5: the first AMD family whose AVX-512 runs on 512-bit datapaths (Zen 4, family 25, splits it in two).
_FULL_WIDTH_FAMILY = 26
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_CPUINFO = "/proc/cpuinfo"
# Below this many multiply-adds a product goes to ``torch.mm``: oneDNN's ~10 us fixed cost per call loses to MKL's
# ~2 us on small products (crossover ~1M multiply-adds, measured on Zen 5: [16, 128] x [128, 384] is a tie).
MIN_MACS = 1 << 20
# Eager and recording a graph, the Python autograd.Function costs ~30 us a product more than F.linear's: at 64 x
# 128 -> 384 forward + backward were 0.93x torch's, at 256 rows 1.6x (bench_linear.py). Compiled graphs trace it away.
MIN_MACS_EAGER_GRAD = 1 << 22
ROW_ALIGN = 16


def onednn_supported() -> bool:
    """Whether this torch build and CPU can run the oneDNN projections at all (x86-64 with oneDNN built in)."""
    return _ONEDNN


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line's value in ``/proc/cpuinfo`` (Linux), or ``None`` where there is none."""
    with contextlib.suppress(OSError), open(_CPUINFO) as cpuinfo:
        for line in cpuinfo:
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    return None


def cpu_vendor() -> str:
    """The CPU's vendor id as the OS reports it (``GenuineIntel``, ``AuthenticAMD``), or ``""`` where it cannot."""
    vendor = _cpuinfo("vendor_id")
    return platform.processor() if vendor is None else vendor  # Windows: "AMD64 Family 26 Model ..., AuthenticAMD"


def cpu_family() -> int | None:
    """The x86 CPU family number (AMD: 25 for Zen 3/4, 26 for Zen 5), or ``None`` where the OS does not say."""
    family = _cpuinfo("cpu family")
    if family is None:
        found = re.search(r"Family (\d+)", platform.processor())
        family = found.group(1) if found else None
    return int(family) if family is not None and family.isdigit() else None


def default_preference(vendor: str, capability: str, setting: str | None, family: int | None) -> bool:
    """Whether oneDNN takes the projections by default: ``setting`` (``RLFORGE_ONEDNN``: ``1``/``0``, ``auto`` or
    unset) decides, else an AMD ``vendor`` (``cpu_vendor()``) of ``family`` 26 (Zen 5) or later (``cpu_family()``)
    whose torch CPU ``capability`` is AVX-512.

    MKL runs AVX2 kernels on AMD cores, AVX-512 or not. That halves its rate on Zen 5's 512-bit datapaths, but costs
    nothing on Zen 4's 256-bit ones (family 25, where oneDNN's per-call cost made the step slower); on AMD cores
    without AVX-512 both libraries run AVX2, and nothing here measured oneDNN's gain there.
    """
    forced = env_switch(_SWITCH, setting)
    if forced is not None:
        return forced
    return "AuthenticAMD" in vendor and capability == "AVX512" and family is not None and family >= _FULL_WIDTH_FAMILY


_PREFERRED = _ONEDNN and default_preference(
    cpu_vendor(), torch.backends.cpu.get_cpu_capability(), os.environ.get(_SWITCH), cpu_family()
)


@contextlib.contextmanager
def onednn_projections(enabled: bool) -> Iterator[None]:
    """Inside the block, projections take oneDNN (``True``, sizes and the rest of ``uses_onednn`` permitting) or
    never (``False``), whatever this CPU's default. Process-wide, like ``torch.backends.mkldnn.flags``; compiled
    graphs guard on it, so switching recompiles."""
    global _PREFERRED
    previous, _PREFERRED = _PREFERRED, _ONEDNN and enabled
    try:
        yield
    finally:
        _PREFERRED = previous


def padded_rows(rows: int) -> int:
    """The bucket ``rows`` rounds up to: a multiple of ``ROW_ALIGN`` and of 1/16 of its power of two, so at most
    16 buckets per octave and at most ~6% (for small counts ``ROW_ALIGN - 1`` rows) above ``rows``."""
    step = max(ROW_ALIGN, 1 << max(rows.bit_length() - 5, 0))
    return -(-rows // step) * step


# Inductor lowers ``mkldnn._linear_pointwise`` only for frozen (constant) weights, so compiled graphs call it
# through this opaque op instead: one extern call per GEMM, as ``aten.mm`` would be.
_LIB = torch.library.Library("rlforge", "FRAGMENT")
_LIB.define("onednn_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIB.define("onednn_linear_add(Tensor residual, Tensor x, Tensor weight) -> Tensor")


def _direct_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _direct_linear_add(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, None, "add")


_LIB.impl("onednn_linear", _direct_linear, "CPU")
_LIB.impl("onednn_linear_add", _direct_linear_add, "CPU")


@torch.library.register_fake("rlforge::onednn_linear", lib=_LIB)
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.register_fake("rlforge::onednn_linear_add", lib=_LIB)
def _(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(residual, memory_format=torch.contiguous_format)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if torch.compiler.is_compiling():
        return torch.ops.rlforge.onednn_linear(x, weight, bias)
    return _direct_linear(x, weight, bias)


def _onednn_linear_add(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if torch.compiler.is_compiling():
        return torch.ops.rlforge.onednn_linear_add(residual, x, weight)
    return _direct_linear_add(residual, x, weight)


def onednn_active(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether products of plain ``dtype`` tensors on ``device`` may run through oneDNN here (sizes aside)."""
    return (
        _PREFERRED
        and torch.backends.mkldnn.enabled
        and device.type == "cpu"
        and dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
    )


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``linear(x, weight)`` runs through oneDNN here (see the module docstring for when it does not)."""
    return (
        onednn_active(x.device, x.dtype)
        and weight.dtype == x.dtype
        and type(x) in _PLAIN
        and type(weight) in _PLAIN
        and _bucketed_and_big(x.shape[:-1].numel(), weight.numel(), x.requires_grad or weight.requires_grad)
    )


def _bucketed_and_big(rows, weight_numel: int, requires_grad: bool) -> bool:
    # Symbolic rows (a graph compiled for a dynamic batch) decide without a guard on their value, which would
    # compile a second graph: a provable multiple of ROW_ALIGN (the packed stream's torch._check) takes oneDNN.
    if isinstance(rows, int) and not torch.compiler.is_compiling():
        least = MIN_MACS_EAGER_GRAD if requires_grad and torch.is_grad_enabled() else MIN_MACS
        return rows == padded_rows(rows) and rows * weight_numel >= least
    return statically_known_true(rows % ROW_ALIGN == 0) and not statically_known_true(rows * weight_numel < MIN_MACS)


class _Linear(torch.autograd.Function):
    """``x @ weight.T (+ bias) (+ residual)``; all three GEMMs in oneDNN (the backward reads transposed views)."""

    @staticmethod
    def forward(x, weight, bias, residual):
        if residual is not None:
            return _onednn_linear_add(residual, x, weight)
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, residual = inputs
        ctx.save_for_backward(x, weight)
        ctx.bias, ctx.residual = bias is not None, residual is not None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors  # contiguous (_run)
        grad = grad.contiguous()  # its transpose is a second operand below
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn_linear(grad, weight.t(), None)
        grad_2d = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[1]:
            # dW = grad^T @ x: oneDNN copies a transposed first operand (it reads a strided second one in place), so
            # the narrower of the two goes first. ~20% off the product at hidden 128, intermediate 384 (measured).
            x_2d = x.reshape(-1, x.shape[-1])
            if x_2d.shape[1] < grad_2d.shape[1]:
                grad_weight = _onednn_linear(x_2d.t(), grad_2d.t(), None).t()
            else:
                grad_weight = _onednn_linear(grad_2d.t(), x_2d.t(), None)
        if ctx.bias and ctx.needs_input_grad[2]:
            grad_bias = grad_2d.sum(0)
        return grad_x, grad_weight, grad_bias, grad if ctx.residual else None


def _run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None):
    # oneDNN reads a strided second operand in place but takes a slow reference path on odd strides (a stride-0
    # gradient made one backward 1000x slower): every operand it sees, here and in the backward, is contiguous or
    # the transpose of a contiguous tensor.
    x, weight = x.contiguous(), weight.contiguous()
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        return _Linear.apply(x, weight, bias, residual)
    # No graph to record: skip the Function's bookkeeping (decode steps run ~30 of these per token).
    return _onednn_linear(x, weight, bias) if residual is None else _onednn_linear_add(residual, x, weight)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through oneDNN when ``uses_onednn(x, weight)``."""
    if uses_onednn(x, weight) and (bias is None or (bias.dtype == torch.float32 and type(bias) in _PLAIN)):
        return _run(x, weight, bias, None)
    return F.linear(x, weight, bias)


def linear_add(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``residual + x @ weight.T`` for 2-D ``x`` and ``residual``, the sum fused into the GEMM.

    oneDNN adds the residual in the GEMM's epilogue; elsewhere ``torch.addmm`` does (the same rounding: one fp32
    sum per element after the product).
    """
    if uses_onednn(x, weight) and residual.dtype == torch.float32 and type(residual) in _PLAIN:
        return _run(x, weight, None, residual)
    return torch.addmm(residual, x, weight.t())
