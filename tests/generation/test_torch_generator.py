"""TorchGenerator: sampling controls, draws that follow the model's distribution, logprobs equal to the trainer's."""

from __future__ import annotations

import pytest
import torch

from rlforge.data import collate_episodes
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams, TorchGenerator, filter_logits
from rlforge.models import compute_logprobs
from rlforge.types import Episode

PROMPTS = ["Q: What is 3 + 5?\nA:", "The quick brown fox jumps over the lazy dog.", "Q:"]


def _encode(tokenizer, prompts=PROMPTS):
    return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]


def test_sampler_logprobs_match_trainer_recompute(tiny_policy):
    """Same weights, fp32: the sampler's per-token logprobs equal a full forward pass's (1e-4)."""
    model, tokenizer = tiny_policy
    for temperature in (1.0, 0.7):
        params = SamplingParams(max_new_tokens=12, temperature=temperature, n=4)
        gen = TorchGenerator(model, tokenizer, seed=3)
        groups = gen.generate(_encode(tokenizer), params)
        episodes = [Episode(prompt="", target="", completion=c) for g in groups for c in g]
        batch = collate_episodes(episodes, tokenizer.pad_token_id)
        with torch.no_grad():
            recomputed, _ = compute_logprobs(
                model, batch.input_ids, batch.attention_mask, batch.prompt_len, temperature
            )
        mask = batch.response_mask.bool()
        assert mask.sum() > 20
        diff = (recomputed - batch.old_logprobs).abs()[mask]
        assert diff.max().item() < 1e-4, diff.max().item()


def test_shapes_versions_and_stop_reasons(tiny_policy):
    model, tokenizer = tiny_policy
    gen = TorchGenerator(model, tokenizer, seed=0, policy_version=7)
    groups = gen.generate(_encode(tokenizer), SamplingParams(max_new_tokens=5, n=3))
    assert [len(g) for g in groups] == [3, 3, 3]
    for group, prompt in zip(groups, _encode(tokenizer), strict=True):
        for c in group:
            assert c.prompt_ids == prompt and c.policy_version == 7
            assert len(c.token_ids) == len(c.logprobs) <= 5
            eos_hit = c.token_ids and c.token_ids[-1] == tokenizer.eos_token_id
            assert c.stop_reason == ("stop" if eos_hit else "length")
            assert tokenizer.eos_token_id not in c.token_ids[:-1]
            assert all(lp <= 0 for lp in c.logprobs)


def test_stop_token_ids_end_responses(tiny_policy):
    model, tokenizer = tiny_policy
    gen = TorchGenerator(model, tokenizer, seed=0)
    first = gen.generate(_encode(tokenizer), SamplingParams(max_new_tokens=6, temperature=0.0))
    tokens = first[0][0].token_ids
    stop = tokens[1]
    again = gen.generate(_encode(tokenizer), SamplingParams(max_new_tokens=6, temperature=0.0, stop_token_ids=[stop]))
    assert again[0][0].token_ids == tokens[: tokens.index(stop) + 1]
    assert again[0][0].stop_reason == "stop"


def test_greedy_matches_hf_generate(tiny_policy):
    model, tokenizer = tiny_policy
    ids = _encode(tokenizer)
    ours = TorchGenerator(model, tokenizer).generate(ids, SamplingParams(max_new_tokens=8, temperature=0.0))
    for prompt, group in zip(ids, ours, strict=True):
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
        expected = out[0, len(prompt) :].tolist()
        if tokenizer.eos_token_id in expected:
            expected = expected[: expected.index(tokenizer.eos_token_id) + 1]
        assert group[0].token_ids == expected


def test_seeded_sampling_is_reproducible_and_state_restores(tiny_policy):
    model, tokenizer = tiny_policy
    params = SamplingParams(max_new_tokens=6, n=2)
    gen = TorchGenerator(model, tokenizer, seed=11)
    state = gen.state_dict()
    a = gen.generate(_encode(tokenizer), params)
    gen.load_state_dict(state)
    b = gen.generate(_encode(tokenizer), params)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    # 0.5 + 0.3 = 0.8 >= 0.8: tokens after the first two are dropped; the top token always stays.
    assert torch.isinf(filter_logits(logits, top_p=0.8)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.01)).tolist() == [[False, True, True, True]]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"max_new_tokens": 0}, "max_new_tokens"), ({"top_p": 0.0}, "top_p"), ({"temperature": -1}, "temperature")],
)
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        SamplingParams(**kwargs)


def _assert_draws_fit(draws: torch.Tensor, probs: torch.Tensor) -> None:
    """Pearson's chi-square of ``draws`` against ``probs`` under its mean + 5 sd (bins expecting < 5 pooled).

    A token of probability 0 (filtered out) that was drawn at all fails at once.
    """
    counts = torch.bincount(draws, minlength=probs.numel()).double()
    assert counts[probs == 0].sum() == 0, "a token outside the filtered distribution was drawn"
    expected = probs.double() * counts.sum()
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = expected > 0
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum().item()
    dof = int(keep.sum()) - 1
    assert stat < dof + 5 * (2 * dof) ** 0.5, (stat, dof)


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.7, 0), (1.0, 40)])
def test_samples_follow_the_model_distribution(tiny_policy, temperature, top_k):
    """20k draws of the first token and of the second (given the commonest first one, through the KV cache) pass a
    chi-square test against softmax(HF logits / T) over the top k, computed here without rlforge's sampling code."""
    model, tokenizer = tiny_policy
    with torch.no_grad():  # a peaked distribution, so that a wrong temperature or filter shows
        model.lm_head.weight.mul_(8.0)
    prompt = _encode(tokenizer)[0]
    params = SamplingParams(max_new_tokens=2, temperature=temperature, top_k=top_k, n=20_000)
    completions = TorchGenerator(model, tokenizer, seed=5).generate([prompt], params)[0]

    def expected(prefix: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([prefix])).logits[0, -1].float() / temperature
        if top_k:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[-1], float("-inf"))
        return logits.softmax(-1)

    first = torch.tensor([c.token_ids[0] for c in completions])
    _assert_draws_fit(first, expected(prompt))

    counts = torch.bincount(first, minlength=model.config.vocab_size)
    counts[tokenizer.eos_token_id] = 0
    token = int(counts.argmax())
    second = torch.tensor([c.token_ids[1] for c in completions if c.token_ids[0] == token])
    assert len(second) > 1000
    _assert_draws_fit(second, expected([*prompt, token]))
