"""The compiled packed training forward (``compile=True``) equals the eager one; failures fall back to eager."""

from __future__ import annotations

import logging

import pytest
import torch
from torch._dynamo.utils import counters

from rlforge.cli import main
from rlforge.generation import compiled_step as compiled_step_mod
from rlforge.models import packed as packed_mod
from rlforge.models.logprobs import token_stats
from tests.helpers import fast_flags, metric_rows
from tests.models.test_packed import _assert_close, _batch, _run


@pytest.fixture()
def fresh_layers(monkeypatch):
    """No compiled layers from an earlier test (their state, e.g. ``failed``, is process-wide)."""
    monkeypatch.setattr(compiled_step_mod, "_SHARED", {})


@pytest.fixture()
def graphs_before():
    """Dynamo's count of graphs compiled so far in this process."""
    return counters["stats"]["unique_graphs"]


@pytest.mark.slow
def test_compiled_layers_match_eager_and_serve_every_shape(tiny_policy, fresh_layers, graphs_before):
    """Logprobs, entropies and every parameter gradient within 1e-5 of eager, for two batch shapes, two graphs."""
    model, tokenizer = tiny_policy
    model.train()
    graphs = []
    for lengths in ([[5, 1, 8], [0, 3, 7], [2, 8, 4]], [[9, 2], [12, 6]]):  # the second: new N, B, T
        batch = _batch(tokenizer, lengths, seed=3)
        mask = batch.attention_mask[:, batch.prompt_len :].bool()
        _assert_close(_run(model, batch, 0.7, compile=True), _run(model, batch, 0.7), mask)
        graphs.append(counters["stats"]["unique_graphs"] - graphs_before)
    # Prompt layer, response layer, logprob/entropy head: one graph each at most (dynamo keeps a function's graphs
    # for the process, so one an earlier test compiled is reused), and symbolic sizes: the new shape compiles none.
    assert 2 <= graphs[0] <= 3 and graphs[1] == graphs[0]
    head = compiled_step_mod._SHARED[token_stats, "cpu"]  # the registry was empty: the compiled run made it
    steps = [*packed_mod._compiled_layers(torch.device("cpu")), head]
    assert not any(step.failed for step in steps)
    assert all(step.options == {"cpp_wrapper": True} for step in steps)  # the CPU build


def test_failed_compile_falls_back_to_eager_once_per_layer_function(tiny_policy, fresh_layers, monkeypatch, caplog):
    model, tokenizer = tiny_policy
    batch = _batch(tokenizer, [[4, 2], [3, 6]])
    expected = _run(model, batch, 1.0)

    def broken_compile(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    with caplog.at_level(logging.WARNING):
        got = _run(model, batch, 1.0, compile=True)
        _run(model, batch, 1.0, compile=True)
    # One warning per layer function (prompt, response), not one per call: a failed step is never retried.
    assert caplog.text.count("torch.compile of the packed training forward") == 2
    assert all(step.failed and not step.active for step in packed_mod._compiled_layers(torch.device("cpu")))
    for ours, ref in zip(got[:2], expected[:2], strict=True):
        assert torch.equal(ours, ref)
    assert all(torch.equal(got[2][name], grad) for name, grad in expected[2].items())


def test_compile_on_an_unsupported_forward_warns(tiny_policy):
    model, tokenizer = tiny_policy
    batch = _batch(tokenizer, [[3, 5], [4, 2]])
    with pytest.warns(UserWarning, match="runs the HF forward uncompiled"):
        _run(model, batch, 1.0, packed=False, compile=True)


def test_module_compile_reaches_the_training_forward(tiny_policy_dir, tmp_path, fresh_layers, monkeypatch, caplog):
    """``--module.compile true`` compiles the training forward (here: a broken compiler, so the fall back runs
    and the run's losses equal an uncompiled run's)."""

    def run(name: str, *extra: str) -> list[str]:
        main(["fit", *fast_flags(tiny_policy_dir, tmp_path / name), *extra])
        return [row["train/loss"] for row in metric_rows(tmp_path / name)]

    eager = run("eager")

    def broken_compile(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    with caplog.at_level(logging.WARNING):
        compiled = run("compiled", "--module.compile", "true")
    assert "torch.compile of the packed training forward" in caplog.text
    assert compiled == eager and len(eager) == 2
