"""``rlforge.generation.linear``: oneDNN projections match a float64 reference in value and in all gradients, eager
and compiled, actually run oneDNN where they claim to, and hand everything else to ``F.linear``/``torch.addmm``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from rlforge.generation import linear as linear_module
from rlforge.generation.linear import (
    MIN_MACS,
    MIN_MACS_EAGER_GRAD,
    ROW_ALIGN,
    default_preference,
    linear,
    linear_add,
    onednn_projections,
    onednn_supported,
    padded_rows,
    uses_onednn,
)

onednn_here = pytest.mark.skipif(not onednn_supported(), reason="oneDNN projections run on x86-64 CPUs only")


@pytest.fixture(autouse=True)
def _onednn_on():
    """oneDNN on whatever this CPU's default (Intel cores default to MKL): the tests check the oneDNN path itself."""
    with onednn_projections(True):
        yield


def _values_and_grads(fn, *tensors: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """``fn``'s output and the gradients of every input for one fixed upstream gradient, inputs cast to ``dtype``."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in tensors]
    out = fn(*leaves)
    upstream = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    out.backward(upstream.to(dtype))
    return [out.detach().double(), *(leaf.grad.double() for leaf in leaves)]


def _assert_fp32_accurate(got: list, want: list, torch_fp32: list, names: list[str]) -> None:
    """Each of ``got`` is as close to the float64 ``want`` as torch's own fp32 op (``torch_fp32``) is, within 4x:
    long reductions (a weight gradient sums over every row) round in fp32 whichever library runs them."""
    for name, g, w, t in zip(names, got, want, torch_fp32, strict=False):
        scale = w.abs().max().item()
        assert (g - w).abs().max() <= 4 * (t - w).abs().max() + 1e-6 * scale, name


def _ops_run(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {event.key for event in prof.key_averages()}


@onednn_here
@pytest.mark.parametrize("rows", [3072, 4096])  # buckets, also times 3; over MIN_MACS_EAGER_GRAD
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("leading", [(), (3,)])
@pytest.mark.parametrize("out_features", [80, 30])  # wider and narrower than the input: both weight-gradient orders
def test_linear_matches_float64_in_value_and_gradients(rows, bias, leading, out_features):
    torch.manual_seed(rows)
    x, weight = torch.randn(*leading, rows, 48), torch.randn(out_features, 48)
    inputs = (x, weight, torch.randn(out_features)) if bias else (x, weight)
    assert uses_onednn(x, weight)
    got = _values_and_grads(linear, *inputs, dtype=torch.float32)
    want = _values_and_grads(F.linear, *inputs, dtype=torch.float64)
    torch_fp32 = _values_and_grads(F.linear, *inputs, dtype=torch.float32)
    _assert_fp32_accurate(got, want, torch_fp32, ["out", "grad x", "grad weight", "grad bias"])
    assert any("_linear_pointwise" in op for op in _ops_run(lambda: linear(x, weight)))


@onednn_here
def test_linear_add_matches_float64_in_value_and_gradients():
    torch.manual_seed(0)
    residual, x, weight = torch.randn(1152, 80), torch.randn(1152, 48), torch.randn(80, 48)
    got = _values_and_grads(linear_add, residual, x, weight, dtype=torch.float32)
    want = _values_and_grads(lambda r, x, w: r + x @ w.t(), residual, x, weight, dtype=torch.float64)
    torch_fp32 = _values_and_grads(lambda r, x, w: r + x @ w.t(), residual, x, weight, dtype=torch.float32)
    _assert_fp32_accurate(got, want, torch_fp32, ["out", "grad residual", "grad x", "grad weight"])
    assert any("_linear_pointwise" in op for op in _ops_run(lambda: linear_add(residual, x, weight)))


@onednn_here
def test_compiled_linears_match_float64_at_every_batch_size():
    """One dynamic graph (as the packed training layers compile) calls oneDNN through the opaque op, forward and
    backward, at sizes it was not traced at."""

    def layer(residual, x, w_in, b_in, w_out):
        torch._check(x.shape[0] % ROW_ALIGN == 0)  # as the packed training forward does after padding its stream
        return linear_add(residual, F.silu(linear(x, w_in, b_in)), w_out)

    compiled = torch.compile(layer, dynamic=True, fullgraph=True)
    torch.manual_seed(1)
    w_in, b_in, w_out = torch.randn(96, 40) / 6, torch.randn(96), torch.randn(40, 96) / 10
    for rows in (400, 32):  # symbolic rows, provably aligned: oneDNN at every size and no second graph
        residual, x = torch.randn(rows, 40), torch.randn(rows, 40)
        args = (residual, x, w_in, b_in, w_out)
        got = _values_and_grads(compiled, *args, dtype=torch.float32)
        want = _values_and_grads(layer, *args, dtype=torch.float64)
        with torch.backends.mkldnn.flags(enabled=False):  # torch's own fp32 ops
            torch_fp32 = _values_and_grads(layer, *args, dtype=torch.float32)
        _assert_fp32_accurate(got, want, torch_fp32, ["out", "residual", "x", "w_in", "b_in", "w_out"])
    with torch.compiler.set_stance("fail_on_recompile"):  # the 30-row call above reused the graph of 400 rows
        ops = _ops_run(lambda: _values_and_grads(compiled, *args, dtype=torch.float32))
    assert "rlforge::onednn_linear" in ops


@pytest.mark.parametrize(
    "case",
    [
        "switched off",
        "not preferred",
        "autocast",
        "small product",
        "small eager training",
        "not a bucket",
        "float64",
        "subclass",
    ],
)
@onednn_here
def test_everything_else_takes_torch_own_linear(case):
    torch.manual_seed(2)
    x, weight, bias = torch.randn(304, 48), torch.randn(80, 48), torch.randn(80)  # oneDNN's, as the cases show
    assert uses_onednn(x, weight)
    if case == "small product":
        x = x[:256]  # a bucket, but 256 x 80 x 48 multiply-adds are under MIN_MACS
        assert 256 * weight.numel() < MIN_MACS
    if case == "small eager training":  # the autograd.Function's Python costs more than oneDNN saves
        x = x.requires_grad_()
        assert x.shape[0] * weight.numel() < MIN_MACS_EAGER_GRAD
    if case == "not a bucket":
        x = torch.cat([x, x[:1]])  # 305 rows
    if case == "float64":
        x, weight, bias = x.double(), weight.double(), bias.double()
    if case == "subclass":
        x = x.as_subclass(_Tagged)
    context = {
        "switched off": torch.backends.mkldnn.flags(enabled=False),
        "not preferred": onednn_projections(False),  # an Intel CPU's default, or RLFORGE_ONEDNN=0
        "autocast": torch.autocast("cpu", dtype=torch.bfloat16),
    }.get(case, contextlib.nullcontext())
    with context:
        assert not uses_onednn(x, weight)
        got, want = linear(x, weight, bias), F.linear(x, weight, bias)
        ops = _ops_run(lambda: linear(x, weight, bias))
    assert torch.equal(got, want)
    assert not any("_linear_pointwise" in op for op in ops)


def test_linear_add_falls_back_to_addmm_bit_for_bit():
    torch.manual_seed(3)
    residual, x, weight = torch.randn(8, 80), torch.randn(8, 48), torch.randn(80, 48)  # below MIN_MACS
    assert torch.equal(linear_add(residual, x, weight), torch.addmm(residual, x, weight.t()))


class _Tagged(torch.Tensor):
    """A tensor subclass (as DTensor or a quantised weight would be): never handed to oneDNN."""


def test_padded_rows_are_few_aligned_buckets_close_above():
    buckets = {padded_rows(n) for n in range(1, 1 << 14)}
    for n in range(1, 1 << 14):
        p = padded_rows(n)
        assert p >= n and p % ROW_ALIGN == 0 and padded_rows(p) == p
        assert p - n < max(ROW_ALIGN, n / 16)
    for octave in range(9, 14):  # 16 buckets per octave, so oneDNN builds few primitives over a run
        assert len([b for b in buckets if 1 << octave < b <= 2 << octave]) == 16


@onednn_here
def test_onednn_sees_only_contiguous_operands_or_their_transposes(monkeypatch):
    """oneDNN took a reference path ~1000x slower on a stride-0 operand: an expanded gradient (``out.sum()``'s) or
    an expanded input reaches it only after a copy."""
    seen = []
    direct = linear_module._direct_linear

    def recording(x, weight, bias):
        seen.append(all(t.is_contiguous() or t.t().is_contiguous() for t in (x, weight)))
        return direct(x, weight, bias)

    monkeypatch.setattr(linear_module, "_direct_linear", recording)
    weight = torch.randn(80, 48, requires_grad=True)
    x = torch.randn(1, 48).expand(4096, 48).requires_grad_()  # stride 0 rows, a bucket
    linear(x, weight).sum().backward()  # the upstream gradient is expanded too
    with torch.no_grad():
        linear(x, weight)
    assert len(seen) == 4 and all(seen)
    torch.testing.assert_close(weight.grad, torch.full((80, 1), 4096.0) * x[0].detach(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("vendor", "capability", "setting", "family", "expected"),
    [
        ("AuthenticAMD", "AVX512", None, 26, True),  # MKL runs AVX2 kernels there: oneDNN ~2.2x (Zen 5)
        ("AuthenticAMD", "AVX512", None, 27, True),  # later families keep full-width AVX-512
        ("AMD64 Family 26 Model 2, AuthenticAMD", "AVX512", "auto", 26, True),  # Windows' platform.processor()
        ("AuthenticAMD", "AVX512", None, 25, False),  # Zen 4: 256-bit datapaths, MKL's AVX2 is as fast (step 8%)
        ("AuthenticAMD", "AVX512", None, None, False),  # family unknown: torch's own path
        ("GenuineIntel", "AVX512", None, 6, False),  # MKL runs AVX-512 there: oneDNN 0.75-0.96x (a Xeon)
        ("AuthenticAMD", "AVX2", None, 26, False),  # both AVX2: no measured gain
        ("", "AVX512", None, 26, False),  # unknown vendor: torch's own path
        ("GenuineIntel", "AVX512", "1", 6, True),
        ("AuthenticAMD", "AVX512", "1", 25, True),
        ("AuthenticAMD", "AVX512", "0", 26, False),
        ("AuthenticAMD", "AVX512", " Off ", 26, False),
    ],
)
def test_default_preference_follows_the_cpu_unless_the_switch_says(vendor, capability, setting, family, expected):
    assert default_preference(vendor, capability, setting, family) is expected


def test_an_unknown_switch_value_warns_and_uses_auto():
    with pytest.warns(UserWarning, match="RLFORGE_ONEDNN='maybe' is not 1, 0 or auto"):
        assert default_preference("AuthenticAMD", "AVX512", "maybe", 26) is True


_WINDOWS_PROCESSOR = "AMD64 Family 26 Model 2 Stepping 0, AuthenticAMD"  # platform.processor() there


@pytest.mark.parametrize(
    ("cpuinfo", "processor", "vendor", "family"),
    [
        ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n", "", "AuthenticAMD", 25),
        ("vendor_id\t: GenuineIntel\ncpu family\t: 6\n", "", "GenuineIntel", 6),
        (None, _WINDOWS_PROCESSOR, _WINDOWS_PROCESSOR, 26),
        (None, "", "", None),
    ],
)
def test_cpu_vendor_and_family_from_cpuinfo_or_the_platform(monkeypatch, tmp_path, cpuinfo, processor, vendor, family):
    """Linux reads ``/proc/cpuinfo``; without it (Windows) both come from ``platform.processor()``."""
    if cpuinfo is not None:
        (tmp_path / "cpuinfo").write_text(cpuinfo)
    monkeypatch.setattr(linear_module, "_CPUINFO", str(tmp_path / "cpuinfo"))
    monkeypatch.setattr(linear_module.platform, "processor", lambda: processor)
    assert linear_module.cpu_vendor() == vendor
    assert linear_module.cpu_family() == family


@onednn_here
def test_the_switch_is_read_at_import():
    """``RLFORGE_ONEDNN`` in the environment decides for the whole process, whatever the CPU."""
    code = (
        "import torch; from rlforge.generation.linear import uses_onednn; "
        "print(uses_onednn(torch.ones(4096, 512), torch.ones(512, 512)))"
    )
    for setting, expected in (("1", "True"), ("0", "False")):
        env = {**os.environ, "RLFORGE_ONEDNN": setting}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120
        )
        assert out.stdout.strip() == expected, out.stderr


@onednn_here
def test_compiled_graphs_follow_the_switch():
    """A graph compiled with oneDNN on is not reused once it is off: dynamo guards on the switch."""
    x, weight = torch.randn(4096, 64), torch.randn(512, 64)
    step = torch.compile(lambda x, weight: linear(x, weight), fullgraph=True)
    with onednn_projections(True):
        on = _ops_run(lambda: step(x, weight))
    with onednn_projections(False):
        off = _ops_run(lambda: step(x, weight))
        torch.testing.assert_close(step(x, weight), F.linear(x, weight))
    assert "rlforge::onednn_linear" in on
    assert not any("onednn" in op or "_linear_pointwise" in op for op in off)
