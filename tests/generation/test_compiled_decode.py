"""The compiled decode step samples what the eager one does; compile failures fall back; the "auto" rule."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch

from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams, TorchGenerator
from rlforge.generation.compiled_step import CompiledStep

PROMPTS = ["Q: What is 3 + 5?\nA:", "Hi", "The quick brown fox jumps over the lazy dog."]


def _encode(tokenizer):
    return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]


def _flat(groups):
    return [c for g in groups for c in g]


@pytest.mark.slow
def test_compiled_decode_matches_eager(tiny_policy):
    """torch.compile (inductor) of forward + sampling: same tokens, stop reasons and logprobs (1e-5)."""
    model, tokenizer = tiny_policy
    prompts = _encode(tokenizer)
    compiled = TorchGenerator(model, tokenizer, seed=5, compile=True)
    eager = TorchGenerator(model, tokenizer, seed=5, compile=False)
    settings = (
        SamplingParams(max_new_tokens=24, n=4),
        SamplingParams(max_new_tokens=24, n=4, temperature=0.7, top_k=20, top_p=0.9),
        SamplingParams(max_new_tokens=24, n=4, temperature=0.0),
    )
    for params in settings:
        ours, ref = _flat(compiled.generate(prompts, params)), _flat(eager.generate(prompts, params))
        assert not compiled.decode_step.failed and compiled.decode_step.active
        assert sum(len(c.token_ids) for c in ours) > 3 * len(ours)  # responses long enough to compare
        for c, r in zip(ours, ref, strict=True):
            assert c.token_ids == r.token_ids and c.stop_reason == r.stop_reason
            assert max(abs(a - b) for a, b in zip(c.logprobs, r.logprobs, strict=True)) < 1e-5
    assert compiled.state_dict()["rng"].equal(eager.state_dict()["rng"])
    assert not compiled.prefill_layer.failed and compiled.prefill_layer._compiled is not None  # prefill compiled too
    assert compiled.decode_step.options == {"cpp_wrapper": True}  # what ran above: the CPU build of the step


@pytest.mark.slow
def test_decode_steps_after_the_first_never_recompile(tiny_policy, monkeypatch):
    """Steps after a generation's first skip dynamo's guards (``reusing_graph``), which is exact only if none of
    them would need another graph: ``fail_on_recompile`` in its place proves that for new batches and lengths."""
    model, tokenizer = tiny_policy
    gen = TorchGenerator(model, tokenizer, seed=3, compile=True)
    reused = []

    @contextlib.contextmanager
    def strict():
        reused.append(1)
        with torch.compiler.set_stance("fail_on_recompile"):
            yield

    monkeypatch.setattr(gen.decode_step, "reusing_graph", strict)
    prompts = _encode(tokenizer)
    settings = (
        (prompts, SamplingParams(max_new_tokens=20, n=2)),
        (prompts[:1], SamplingParams(max_new_tokens=70, n=3)),  # another batch, a longer cache bucket
        (prompts[1:], SamplingParams(max_new_tokens=20, n=2, temperature=0.0)),  # greedy: another graph
        (prompts, SamplingParams(max_new_tokens=12, n=2)),  # back to the first graph
    )
    for batch, params in settings:
        gen.generate(batch, params)
        assert not gen.decode_step.failed  # a recompile inside the loop raises, and the step would fall back
    assert len(reused) > 60


@pytest.mark.slow
def test_one_compiled_step_serves_every_cache_size(tiny_policy):
    """The cache length is dynamic: caches of new sizes (longer prompts, ``CACHE_BUCKET`` steps) run the first graph.
    Each size once compiled its own, and past dynamo's 8 graphs per function compiled decoding gave up."""
    model, tokenizer = tiny_policy
    gen = TorchGenerator(model, tokenizer, seed=0, compile=True)
    params = SamplingParams(max_new_tokens=8, n=2)
    gen.generate([[5] * 10], params)  # compiles, over a cache of 64 columns
    with torch.compiler.set_stance("fail_on_recompile"):
        for width in (70, 130, 200):  # caches of 128, 192 and 256 columns
            (group,) = gen.generate([[5] * width], params)
            assert not gen.decode_step.failed and not gen.prefill_layer.failed  # a recompile would have raised
            assert all(1 <= len(c.token_ids) <= 8 for c in group)


def test_failed_compile_falls_back_to_eager(tiny_policy, monkeypatch, caplog):
    model, tokenizer = tiny_policy
    params = SamplingParams(max_new_tokens=8, n=2)
    expected = _flat(TorchGenerator(model, tokenizer, seed=1, compile=False).generate(_encode(tokenizer), params))

    def broken_compile(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    gen = TorchGenerator(model, tokenizer, seed=1, compile=True)
    with caplog.at_level(logging.WARNING):
        got = _flat(gen.generate(_encode(tokenizer), params))
    assert gen.decode_step.failed and not gen.decode_step.active
    assert "of the decode step failed" in caplog.text and "eagerly from now on" in caplog.text
    assert [c.token_ids for c in got] == [c.token_ids for c in expected]


def test_auto_compiles_only_after_the_eager_budget(tiny_policy):
    model, tokenizer = tiny_policy
    params = SamplingParams(max_new_tokens=4)
    never = TorchGenerator(model, tokenizer, compile="auto", compile_after_s=1e9)
    never.generate(_encode(tokenizer), params)
    assert 0 < never.decode_step.eager_s < 1e9 and not never.decode_step.active
    soon = TorchGenerator(model, tokenizer, compile="auto", compile_after_s=1e-9)
    assert not soon.decode_step.active  # nothing decoded yet: the first generate is eager
    soon.decode_step.record_eager(1e-6)
    assert soon.decode_step.active
    assert not TorchGenerator(model, tokenizer, compile=False, compile_after_s=0.0).decode_step.active
    with pytest.raises(ConfigError, match="compile"):
        CompiledStep(lambda: None, compile="yes")


def test_auto_announces_its_compile_once(monkeypatch, caplog):
    # "auto" compiles in the middle of a run, a pause of up to ~30 s: one line says so; True (asked for) says nothing.
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    auto = CompiledStep(lambda x: x + 1, compile="auto", compile_after_s=5.0)
    asked = CompiledStep(lambda x: x + 1, compile=True)
    with caplog.at_level(logging.WARNING, logger="rlforge.generation.compiled_step"):
        assert auto(1) == 2 and not caplog.records  # eager: under the budget
        auto.record_eager(6.0)
        assert auto(1) == 2 and auto(2) == 3 and asked(1) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages
    assert "compiling the decode step after 6 s of eager decoding" in messages[0]
    assert "{compile: false}" in messages[0]


def test_stop_checks_every_k_steps_give_the_same_completions(tiny_policy, monkeypatch):
    """Accelerators check "all rows stopped" every 8 steps (no per-token sync); the completions are the same."""
    from rlforge.generation import torch_generator

    model, tokenizer = tiny_policy
    # ~6% of the vocabulary stops a response, so rows stop at scattered steps and some run to the limit.
    params = SamplingParams(max_new_tokens=30, n=4, stop_token_ids=list(range(100, 120)))
    every_step = _flat(TorchGenerator(model, tokenizer, seed=2).generate(_encode(tokenizer), params))
    monkeypatch.setattr(torch_generator, "EOS_CHECK_EVERY", {"cpu": 8})
    every_8 = _flat(TorchGenerator(model, tokenizer, seed=2).generate(_encode(tokenizer), params))
    assert {c.stop_reason for c in every_step} == {"stop", "length"}
    assert len({len(c.token_ids) for c in every_step}) > 3
    for a, b in zip(every_8, every_step, strict=True):
        assert (a.token_ids, a.logprobs, a.stop_reason) == (b.token_ids, b.logprobs, b.stop_reason)


def test_reusing_graph_skips_guards_only_when_compiled_under_the_default_stance():
    from torch._dynamo import eval_frame  # the stance has no public getter

    step = CompiledStep(lambda x: x + 1, compile=True)
    with step.reusing_graph():
        assert not eval_frame._stance.skip_guard_eval_unsafe  # nothing compiled yet: the next call needs guards
    assert step(torch.ones(2)).tolist() == [2.0, 2.0]
    with step.reusing_graph():
        assert eval_frame._stance.skip_guard_eval_unsafe
    assert not eval_frame._stance.skip_guard_eval_unsafe
    with torch.compiler.set_stance("force_eager"), step.reusing_graph():  # a user's stance is left alone
        assert eval_frame._stance.stance == "force_eager" and not eval_frame._stance.skip_guard_eval_unsafe
    eager = CompiledStep(lambda x: x + 1, compile=False)
    eager(torch.ones(2))
    with eager.reusing_graph():
        assert not eval_frame._stance.skip_guard_eval_unsafe
