"""rlforge's CPU decode-attention kernels: exact against a float64 reference at every shape path (query chunks,
key/column tails, strided cache views), clear errors on bad input, and a clean fall back when they cannot build."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from rlforge.generation import cpu_kernels
from rlforge.generation.cpu_kernels import load_decode_attention

# (query heads per KV head G, head dim D, span S): G in chunks of 4 (1, 3 = one chunk; 5, 9 = several); D a multiple
# of 32, of 16 only (48, 80) or neither (20); S below one 16-column block, between blocks, and over 64-column blocks.
SHAPES = [(1, 32, 1), (2, 32, 130), (3, 64, 17), (5, 80, 65), (4, 128, 64), (9, 16, 250), (2, 48, 3), (7, 20, 33)]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    assert load_decode_attention(), "the CPU decode-attention kernels did not build (a C++ compiler and ninja?)"


@pytest.mark.parametrize(("g", "d", "s"), SHAPES)
def test_kernels_match_a_float64_reference(g, d, s):
    torch.manual_seed(g * 1000 + d * 10 + s)
    n, capacity = 6, s + 7  # views into a longer cache, as the decoder passes them
    q = torch.randn(n, g, d)
    keys_t = torch.randn(n, d, capacity)[:, :, :s]
    values = torch.randn(n, capacity, d)[:, :s]
    scores = torch.ops.rlforge.decode_scores(q, keys_t, 0.3)
    expected = torch.einsum("ngd,nds->ngs", q.double(), keys_t.double()) * 0.3
    torch.testing.assert_close(scores.double(), expected, rtol=1e-5, atol=1e-5)
    probs = torch.randn(n, g, s).softmax(-1)
    mixed = torch.ops.rlforge.decode_mix(probs, values)
    expected = torch.einsum("ngs,nsd->ngd", probs.double(), values.double())
    torch.testing.assert_close(mixed.double(), expected, rtol=1e-5, atol=1e-6)


def test_kernels_take_non_contiguous_inputs():
    q = torch.randn(4, 8, 3).transpose(1, 2)  # [4, 3, 8], not contiguous
    keys_t = torch.randn(4, 10, 8).transpose(1, 2)  # last dim strided: copied, still exact
    scores = torch.ops.rlforge.decode_scores(q, keys_t, 1.0)
    torch.testing.assert_close(scores, torch.bmm(q, keys_t))
    probs, values = torch.rand(4, 3, 10), torch.randn(4, 8, 10).transpose(1, 2)
    torch.testing.assert_close(torch.ops.rlforge.decode_mix(probs, values), torch.bmm(probs, values))


def test_kernels_reject_what_they_do_not_compute():
    q, keys_t = torch.randn(2, 2, 8), torch.randn(2, 8, 5)
    with pytest.raises(RuntimeError, match="decode_scores: q must be a 3-D float32 CPU tensor"):
        torch.ops.rlforge.decode_scores(q.bfloat16(), keys_t, 1.0)
    with pytest.raises(RuntimeError, match="decode_scores: keys_t .* does not match q"):
        torch.ops.rlforge.decode_scores(q, torch.randn(2, 4, 5), 1.0)
    with pytest.raises(RuntimeError, match="decode_mix: values .* does not match probs"):
        torch.ops.rlforge.decode_mix(torch.rand(2, 2, 5), torch.randn(2, 6, 8))


def test_kernels_compile_as_opaque_ops():
    """The fake implementations give ``torch.compile`` their shapes: one graph, dynamic span, same numbers."""

    def attend(q, keys_t, values):
        scores = torch.ops.rlforge.decode_scores(q, keys_t, 0.5)
        return torch.ops.rlforge.decode_mix(scores.softmax(-1), values)

    compiled = torch.compile(attend, fullgraph=True, dynamic=True)
    for s in (9, 40):
        q, keys_t, values = torch.randn(4, 2, 16), torch.randn(4, 16, s), torch.randn(4, s, 16)
        expected = torch.bmm((torch.bmm(q, keys_t) * 0.5).softmax(-1), values)
        torch.testing.assert_close(compiled(q, keys_t, values), expected)


def test_failed_build_falls_back_with_one_warning(monkeypatch, caplog):
    def no_ninja(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_ninja)
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels.load_decode_attention.__wrapped__() is False  # the uncached body: the build itself
    (record,) = caplog.records
    assert "could not build" in record.getMessage() and "Ninja is required" in record.getMessage()
    assert "RLFORGE_CPU_KERNELS=0" in record.getMessage()


@pytest.mark.parametrize("setting", ["0", "false", "OFF"])
def test_env_switch_skips_the_build(monkeypatch, setting):
    """Every "off" that ``RLFORGE_ONEDNN`` takes also turns the kernels off (``false`` used to build them)."""

    tried = []  # recorded, not raised: a raise would be caught as a failed build, which also returns False
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: tried.append(kwargs["name"]))
    monkeypatch.setenv("RLFORGE_CPU_KERNELS", setting)
    assert cpu_kernels.load_decode_attention.__wrapped__() is False
    assert not tried


def test_a_bad_env_switch_warns_and_builds(monkeypatch):
    built = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: built.append(kwargs["name"]))
    monkeypatch.setattr(cpu_kernels, "_register_fakes", lambda: None)  # the ops may be registered already
    monkeypatch.setenv("RLFORGE_CPU_KERNELS", "nope")
    with pytest.warns(UserWarning, match="RLFORGE_CPU_KERNELS='nope' is not 1, 0 or auto: using auto"):
        cpu_kernels.load_decode_attention.__wrapped__()
    assert built  # auto: the build is tried


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_no_build_is_tried_off_linux(monkeypatch, caplog, platform):
    """Apple clang and MSVC take none of the Linux flags: a build would fail again in every new process."""

    def must_not_build(**kwargs):
        raise AssertionError(f"built on {platform}")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", must_not_build)
    monkeypatch.setattr(cpu_kernels.sys, "platform", platform)
    with caplog.at_level(logging.INFO, logger=cpu_kernels.__name__):
        assert cpu_kernels.load_decode_attention.__wrapped__() is False
    assert "built on Linux only" in caplog.text


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf to list the library's NEEDED")
def test_kernels_link_openmp():
    """Built without ``-fopenmp``, ``at::parallel_for`` (header code over OpenMP) compiles to a serial loop: the
    kernels gave right answers on one thread whatever ``torch.set_num_threads`` said (2-thread generate: 1.95x
    HF instead of 2.4x)."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    (library,) = {line.split()[-1] for line in maps if "rlforge_decode_attention" in line.split()[-1]}
    dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any(name in line for line in needed for name in ("libgomp", "libiomp", "libomp")), needed


def test_each_torch_install_builds_under_its_own_name(tmp_path):
    """Two environments share ~/.cache/torch_extensions: under one name each would rebuild the other's library (its
    build.ninja names that torch's include paths), relinking it while the other's processes load it."""
    name = cpu_kernels.extension_name
    here = name("AVX512", "2.13.0+cpu", tmp_path / "venv_a" / "torch")
    assert here == name("AVX512", "2.13.0+cpu", tmp_path / "venv_a" / "torch")
    assert here.startswith("rlforge_decode_attention_avx512_")
    assert here != name("AVX512", "2.13.0+cpu", tmp_path / "venv_b" / "torch")
    assert here != name("AVX512", "2.14.0+cpu", tmp_path / "venv_a" / "torch")
    assert here != name("AVX2", "2.13.0+cpu", tmp_path / "venv_a" / "torch")
