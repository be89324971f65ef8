"""TorchGenerator: sampling controls, and its logprobs equal the trainer's recomputed logprobs."""

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
