"""compute_logprobs: the shared-prompt pass equals one plain full forward (of an fp64 copy), in value and gradient."""

from __future__ import annotations

import pytest
import torch

from rlforge.data import collate_episodes
from rlforge.generation.compiled_step import shared_step
from rlforge.models import compute_logprobs
from rlforge.models.logprobs import shared_prompt_rows, token_stats
from rlforge.types import Completion, Episode
from tests.models.test_packed import fp64_copy


def _batch(tokenizer, group_size=3):
    """Groups of mixed prompt lengths (left padding) and mixed response lengths (right padding, one empty)."""
    g = torch.Generator().manual_seed(0)
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in ["Q: What is 3 + 5?\nA:", "Hi", "12+7="]]
    episodes = []
    for prompt in prompts:
        for j in range(group_size):
            n = 0 if (prompt == prompts[1] and j == 0) else int(torch.randint(1, 9, (1,), generator=g))
            tokens = torch.randint(3, len(tokenizer), (n,), generator=g).tolist()
            completion = Completion(text="", token_ids=tokens, logprobs=[0.0] * n, prompt_ids=prompt)
            episodes.append(Episode(prompt="", target="", completion=completion, advantage=float(j - 1)))
    return collate_episodes(episodes, tokenizer.pad_token_id)


def _logprobs_and_grads(model, batch, share, temperature):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = compute_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.prompt_len, temperature, True, share_prompts=share
    )
    mask = batch.response_mask
    ((logprobs * batch.advantages[:, None] * mask).sum() + (entropy * mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), entropy.detach(), grads


def test_shared_prompt_pass_matches_full_forward(tiny_policy):
    model, tokenizer = tiny_policy
    reference = fp64_copy(model)
    batch = _batch(tokenizer)
    first, inverse = shared_prompt_rows(batch.input_ids, batch.attention_mask, batch.prompt_len)
    groups = inverse.view(3, 3)
    assert (groups == groups[:, :1]).all() and len(set(groups[:, 0].tolist())) == 3
    assert (inverse[first] == torch.arange(3)).all()
    mask = batch.response_mask.bool()
    for temperature in (1.0, 0.7):
        ref_lp, ref_ent, ref_grads = _logprobs_and_grads(reference, batch, False, temperature)
        lp, ent, grads = _logprobs_and_grads(model, batch, True, temperature)
        assert (lp - ref_lp).abs()[mask].max() < 1e-5
        assert (ent - ref_ent).abs()[mask].max() < 1e-5
        assert grads.keys() == ref_grads.keys() and len(grads) > 10
        for name, grad in grads.items():  # fp32 rounding: compare relative to each tensor's scale
            ref = ref_grads[name]
            assert (grad - ref).abs().max() <= 1e-5 * ref.abs().max(), name


def test_distinct_prompts_take_the_plain_forward(tiny_policy):
    _, tokenizer = tiny_policy
    batch = _batch(tokenizer, group_size=1)
    assert shared_prompt_rows(batch.input_ids, batch.attention_mask, batch.prompt_len) is None


def test_shuffled_rows_still_share(tiny_policy):
    """Minibatches are random subsets: rows of one prompt need not be adjacent."""
    model, tokenizer = tiny_policy
    batch = _batch(tokenizer).select(torch.tensor([4, 0, 8, 1, 5, 2]))
    mask = batch.response_mask.bool()
    ref, _, _ = _logprobs_and_grads(fp64_copy(model), batch, False, 1.0)
    ours, _, _ = _logprobs_and_grads(model, batch, True, 1.0)
    assert (ours - ref).abs()[mask].max() < 1e-5


def test_sharded_policy_always_runs_the_two_pass_forward(tiny_policy, monkeypatch):
    """FSDP forwards are collectives: a sharded policy runs prompts then responses even when no two rows share a
    prompt (one rank's rows may, another's not), with the plain forward's values and gradients."""
    import rlforge.models.logprobs as logprobs_mod

    model, tokenizer = tiny_policy
    batch = _batch(tokenizer, group_size=1)
    mask = batch.response_mask.bool()
    ref_lp, ref_ent, ref_grads = _logprobs_and_grads(fp64_copy(model), batch, False, 1.0)
    monkeypatch.setattr(logprobs_mod, "is_sharded", lambda m: True)
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    model.zero_grad(set_to_none=True)
    lp, ent = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_len, 1.0, True, packed=False)
    handle.remove()
    assert len(calls) == 2
    assert (lp - ref_lp).abs()[mask].max() < 1e-5 and (ent - ref_ent).abs()[mask].max() < 1e-5
    ((lp * batch.advantages[:, None] * batch.response_mask).sum() + (ent * batch.response_mask).sum()).backward()
    for name, ref in ref_grads.items():
        assert (model.get_parameter(name).grad - ref).abs().max() <= 1e-5 * ref.abs().max(), name


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mode", ["grad", "detached", "none"])
def test_token_stats_match_float64_log_softmax(mode, compiled):
    """``token_stats`` (what a compiled training forward runs) against an fp64 ``log_softmax``: values, and the
    logits' gradient with the entropy in the graph (``grad``) or out of it (``detached``)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 300, generator=g) * 4
    targets = torch.randint(0, 300, (37,), generator=g)
    w_lp, w_ent = torch.randn(37, generator=g), torch.randn(37, generator=g)
    stats = shared_step(token_stats, logits.device, "test") if compiled else token_stats
    x = logits.clone().requires_grad_()
    lp, ent = stats(x, targets, 0.7, mode)
    ref_x = logits.double().requires_grad_()
    ref_logp = torch.log_softmax(ref_x / 0.7, dim=-1)
    ref_lp, ref_ent = ref_logp.gather(-1, targets[:, None]).squeeze(-1), -(ref_logp.exp() * ref_logp).sum(-1)
    assert (lp.double() - ref_lp).abs().max() < 1e-5
    objective, ref_objective = (lp * w_lp).sum(), (ref_lp * w_lp.double()).sum()
    if mode == "none":
        assert ent is None
    else:
        assert (ent.double() - ref_ent).abs().max() < 1e-5
        assert ent.requires_grad == (mode == "grad")
        if mode == "grad":
            objective, ref_objective = objective + (ent * w_ent).sum(), ref_objective + (ref_ent * w_ent.double()).sum()
    objective.backward()
    ref_objective.backward()
    assert (x.grad.double() - ref_x.grad).abs().max() < 1e-5
