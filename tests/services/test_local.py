"""``LocalReference``: the frozen copy and its logprob forward, compiled when the module compiles its forwards."""

from __future__ import annotations

import pytest
import torch

from rlforge.cli import main
from rlforge.generation import compiled_step as compiled_step_mod
from rlforge.models import compute_logprobs
from rlforge.models import packed as packed_mod
from rlforge.services import LocalReference
from tests.helpers import fast_flags, metric_rows
from tests.models.test_packed import _batch


@pytest.fixture()
def grad_modes(monkeypatch):
    """Records ``torch.is_grad_enabled()`` at each use of the compiled packed layers, which run eagerly here."""
    modes: list[bool] = []

    def spy(device):
        modes.append(torch.is_grad_enabled())
        return packed_mod.prompt_layer, packed_mod._response_layer

    monkeypatch.setattr(packed_mod, "_compiled_layers", spy)
    return modes


def test_the_reference_is_a_frozen_copy(tiny_policy):
    policy, tokenizer = tiny_policy
    batch = _batch(tokenizer, [[3, 5], [4, 2]])
    reference = LocalReference(policy)
    expected, _ = compute_logprobs(policy, batch.input_ids, batch.attention_mask, batch.prompt_len, 0.7)
    with torch.no_grad():
        for p in policy.parameters():  # a policy update must not reach the reference
            p.add_(0.05)
    got = reference.logprobs(batch, 0.7)
    assert reference.model is not policy and not any(p.requires_grad for p in reference.model.parameters())
    assert torch.allclose(got, expected.detach(), atol=1e-6)


@pytest.mark.slow
def test_compiled_reference_matches_the_eager_one(tiny_policy, monkeypatch):
    policy, tokenizer = tiny_policy
    monkeypatch.setattr(compiled_step_mod, "_SHARED", {})  # no compiled state (e.g. `failed`) from an earlier test
    batch = _batch(tokenizer, [[5, 1, 8], [0, 3, 7], [2, 8, 4]], seed=3)
    eager = LocalReference(policy).logprobs(batch, 0.7)
    compiled = LocalReference(policy, compile=True).logprobs(batch, 0.7)
    assert not any(step.failed for step in packed_mod._compiled_layers(torch.device("cpu")))
    mask = batch.response_mask.bool()
    assert (compiled - eager).abs()[mask].max() < 1e-5 and (compiled[~mask] == 0).all()


def test_module_compile_reaches_the_reference_and_proximal_forwards(tiny_policy_dir, tmp_path, grad_modes):
    """With ``--module.compile true`` and a KL term, the reference forward (no grad) runs the compiled layers as
    well as the training forward; with asynchronous rollouts the proximal forward (no grad) does too."""
    flags = fast_flags(tiny_policy_dir, tmp_path / "kl", trainer__max_steps=1, module__compile="true")
    main(["fit", *flags, "--module.loss.init_args.beta", "0.1"])
    assert metric_rows(tmp_path / "kl") and grad_modes == [False, True]  # reference, then training
    grad_modes.clear()
    flags = fast_flags(tiny_policy_dir, tmp_path / "async", trainer__max_steps=3, module__compile="true")
    main(["fit", *flags, "--trainer.strategy.init_args.max_staleness", "1"])
    # Asynchronous rollouts: a proximal forward (no grad) before each of the 3 updates.
    assert grad_modes == [False, True] * 3


def test_without_compile_no_forward_compiles(tiny_policy_dir, tmp_path, grad_modes):
    flags = fast_flags(tiny_policy_dir, tmp_path / "kl", trainer__max_steps=1)
    main(["fit", *flags, "--module.loss.init_args.beta", "0.1"])
    assert metric_rows(tmp_path / "kl") and grad_modes == []
