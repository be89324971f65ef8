"""``SamplingParams.seed``: prompt i of a request samples from ``seed + i`` alone, whatever else is in the batch.

This is what makes a 2-rank run sample what one process samples (``RLTrainer(sampling_seeds="group")``).
"""

from __future__ import annotations

import dataclasses

import pytest

from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams, TorchGenerator
from rlforge.grpo import GRPOModule

PROMPTS = ["Q: What is 3 + 5?\nA:", "The quick brown fox", "Q:", "Once upon a time"]


def _tokens(groups):
    return [[c.token_ids for c in group] for group in groups]


def test_a_prompt_samples_the_same_alone_or_in_a_batch_on_another_rank(tiny_policy):
    model, tokenizer = tiny_policy
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    params = SamplingParams(max_new_tokens=8, n=3, seed=1000)
    whole = TorchGenerator(model, tokenizer, seed=1).generate(ids, params)
    # "rank 1" holds prompts 2..3 with the seed offset by its first prompt's index; a different generator seed.
    share = TorchGenerator(model, tokenizer, seed=99).generate(ids[2:], dataclasses.replace(params, seed=1002))
    assert _tokens(share) == _tokens(whole)[2:]
    assert len({tuple(t) for t in _tokens(whole)[0]}) > 1  # the n samples of a prompt still differ
    other = TorchGenerator(model, tokenizer, seed=1).generate(ids, dataclasses.replace(params, seed=2000))
    assert _tokens(other) != _tokens(whole)


def test_a_fixed_seed_in_the_module_config_is_refused():
    with pytest.raises(ConfigError, match="module.sampling.seed is set per request"):
        GRPOModule(sampling=SamplingParams(seed=3))
