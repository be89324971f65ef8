"""The padding-free (packed) training forward equals the plain HF forward, in value and in gradient."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from rlforge.data import collate_episodes
from rlforge.generation import linear as linear_mod
from rlforge.generation.linear import padded_rows
from rlforge.models import compute_logprobs
from rlforge.models import packed as packed_mod
from rlforge.models.packed import supports_packed
from rlforge.types import Completion, Episode
from tests.generation.test_decoder import ARCHS, _model

PROMPTS = ["Q: What is 3 + 5?\nA:", "Hi", "12+7="]


def _batch(tokenizer, lengths: list[list[int]], seed: int = 0):
    """One group per prompt, response ``j`` of prompt ``i`` of length ``lengths[i][j]`` (random tokens)."""
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for text, group in zip(PROMPTS, lengths, strict=False):
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        for j, n in enumerate(group):
            tokens = torch.randint(3, len(tokenizer), (n,), generator=g).tolist()
            completion = Completion(text="", token_ids=tokens, logprobs=[0.0] * n, prompt_ids=prompt)
            episodes.append(Episode(prompt="", target="", completion=completion, advantage=float(j - 1)))
    return collate_episodes(episodes, tokenizer.pad_token_id)


def fp64_copy(model):
    """The reference forward's model: in fp32 the plain HF forward itself moved by up to 3.2e-5 in about one
    process in 60 (same weights and inputs; the packed forward bit-stable), too close to a 1e-5 check."""
    return copy.deepcopy(model).double()


def _run(model, batch, temperature: float, **kwargs):
    """Logprobs, entropies and parameter gradients of an advantage-weighted objective (+ entropy)."""
    model.zero_grad(set_to_none=True)
    logprobs, entropy = compute_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.prompt_len, temperature, True, **kwargs
    )
    mask = batch.response_mask
    ((logprobs * batch.advantages[:, None] * mask).sum() + (entropy * mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), entropy.detach(), grads


def _assert_close(ours, reference, mask, packed: bool = True):
    (lp, ent, grads), (ref_lp, ref_ent, ref_grads) = ours, reference
    assert (lp - ref_lp).abs()[mask].max() < 1e-5
    assert (ent - ref_ent).abs()[mask].max() < 1e-5
    if packed:  # the HF forward leaves values at padding positions (callers mask them); the packed one zeros them
        assert (lp[~mask] == 0).all() and (ent[~mask] == 0).all()
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name, grad in grads.items():  # fp32 summation order differs: compare relative to each tensor's scale
        ref = ref_grads[name]
        assert (grad - ref).abs().max() <= 1e-5 * ref.abs().max(), name


@pytest.fixture()
def spy(monkeypatch):
    """Counts calls of the packed forward, so a test knows which path ran."""
    calls = []
    original = packed_mod.packed_response_logits

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr("rlforge.models.logprobs.packed_response_logits", counted)
    return calls


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_packed_matches_hf_forward_per_architecture(arch, tiny_policy, spy):
    _, tokenizer = tiny_policy
    model = _model(arch, tokenizer).train()
    batch = _batch(tokenizer, [[5, 1, 8], [0, 3, 7], [2, 8, 4]])  # mixed lengths, one empty response
    mask = batch.attention_mask[:, batch.prompt_len :].bool()
    for temperature in (1.0, 0.7):
        reference = _run(fp64_copy(model), batch, temperature, share_prompts=False)  # one plain HF forward
        assert not spy
        _assert_close(_run(model, batch, temperature), reference, mask)
        assert spy
        spy.clear()


def test_packed_edge_layouts(tiny_policy, spy):
    model, tokenizer = tiny_policy
    layouts = {
        "every prompt distinct": [[4], [6], [1]],
        "responses of one token": [[1, 1], [1, 0], [1, 1]],
        "one prompt": [[7, 2, 5, 5]],
    }
    for name, lengths in layouts.items():
        batch = _batch(tokenizer, lengths, seed=1)
        mask = batch.attention_mask[:, batch.prompt_len :].bool()
        reference = _run(fp64_copy(model), batch, 1.0, share_prompts=False)
        ours = _run(model, batch, 1.0)
        assert spy, name
        spy.clear()
        _assert_close(ours, reference, mask)


def test_unsupported_layouts_and_models_fall_back(tiny_policy, spy):
    model, tokenizer = tiny_policy
    batch = _batch(tokenizer, [[3, 5], [4, 2]])
    assert supports_packed(model, batch.input_ids, batch.attention_mask, batch.prompt_len)
    # A hole inside a response (not right-padded) is not a layout the packed forward knows.
    holed = batch.attention_mask.clone()
    holed[0, batch.prompt_len + 1] = 0
    assert not supports_packed(model, batch.input_ids, holed, batch.prompt_len)
    reference = _run(model, batch, 1.0, share_prompts=False)
    _run(model, batch, 1.0, packed=False)
    assert not spy  # packed=False keeps the HF forward
    # Recomputation belongs to the HF forward (transformers 5.25 renamed the switch; the old name warns).
    enable = getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)
    enable()
    assert not supports_packed(model, batch.input_ids, batch.attention_mask, batch.prompt_len)
    ours = _run(model, batch, 1.0)
    assert not spy
    _assert_close(ours, reference, batch.attention_mask[:, batch.prompt_len :].bool(), packed=False)


onednn_here = pytest.mark.skipif(not linear_mod.onednn_supported(), reason="oneDNN projections run on x86-64 CPUs only")


@pytest.fixture()
def onednn_on():
    """oneDNN on whatever this CPU's default (Intel cores default to MKL and pad nothing)."""
    with linear_mod.onednn_projections(True):
        yield


@onednn_here
def test_packed_stream_padded_to_a_bucket_runs_onednn_and_matches_hf(tiny_policy, monkeypatch, onednn_on):
    """A batch big enough for oneDNN: the stream grows to a ``padded_rows`` bucket with unfed slots, every
    projection's row count is a bucket, and values and gradients still match the fp64 HF forward."""
    model, tokenizer = tiny_policy
    padded = []
    original = packed_mod._pad_stream

    def recorded(fed, feeds, weight):
        out = original(fed, feeds, weight)
        padded.append((fed.numel(), out[0].numel(), out[1]))
        return out

    monkeypatch.setattr(packed_mod, "_pad_stream", recorded)
    batch = _batch(tokenizer, [[60, 41, 60, 9, 60, 60, 33, 60]] * 3, seed=2)
    mask = batch.attention_mask[:, batch.prompt_len :].bool()
    reference = _run(fp64_copy(model), batch, 1.0, share_prompts=False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ours = _run(model, batch, 1.0)
    _assert_close(ours, reference, mask)
    ((real, grown, aligned),) = padded
    assert aligned and grown == padded_rows(real) > real
    assert any("_linear_pointwise" in event.key for event in prof.key_averages())


@onednn_here
def test_stream_without_room_for_its_bucket_stays_as_is(onednn_on):
    feeds = torch.ones(3, 7, dtype=torch.bool)
    feeds[0, 6] = False  # 20 fed slots, bucket 32: one free slot is not enough
    fed = feeds.reshape(-1).nonzero().squeeze(-1)
    weight = torch.zeros(4, 4)
    out, aligned = packed_mod._pad_stream(fed, feeds, weight)
    assert torch.equal(out, fed) and not aligned
    with torch.backends.mkldnn.flags(enabled=False):  # nothing pads where oneDNN does not run
        out, aligned = packed_mod._pad_stream(fed[:-6], feeds, weight)
    assert torch.equal(out, fed[:-6]) and not aligned


@onednn_here
def test_prompt_pass_left_padded_to_a_bucket(onednn_on):
    weight = torch.zeros(4, 4)
    assert packed_mod._prompt_padding(8, 15, weight) == 1  # 8 x 16 = 128 rows
    assert packed_mod._prompt_padding(3, 7, weight) == 9  # 3 x 16 = 48
    assert packed_mod._prompt_padding(4, 32, weight) == 0  # already one
    with torch.backends.mkldnn.flags(enabled=False):
        assert packed_mod._prompt_padding(8, 15, weight) == 0
    with linear_mod.onednn_projections(False):  # nor where MKL is preferred (Intel's default)
        assert packed_mod._prompt_padding(8, 15, weight) == 0
