"""``Services``: the one weight-sync path, the generator side of a checkpoint, background submission."""

from __future__ import annotations

import copy

import pytest
import torch

from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams, TorchGenerator
from rlforge.services import Done, Services, Staleness, submit


@pytest.fixture()
def services(tiny_policy):
    policy, tokenizer = tiny_policy
    generator = TorchGenerator(copy.deepcopy(policy).requires_grad_(False), tokenizer, seed=0)
    weights = lambda: policy.state_dict()  # noqa: E731
    return policy, Services(sampler=generator, generator=generator, payload=weights, full_weights=weights)


def test_sync_loads_the_policy_into_the_generator_and_logs_bytes(services):
    policy, svc = services
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    logged: dict[str, float] = {}
    sent = svc.sync(3, lambda name, value, reduce=None: logged.__setitem__(name, value))
    assert svc.generator.policy_version == 3
    for name, tensor in policy.state_dict().items():
        assert torch.equal(svc.generator.weights_state_dict()[name], tensor)
    expected = sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    assert sent == logged["perf/sync_bytes"] == expected and logged["perf/sync_s"] >= 0


def test_state_keeps_stale_generator_weights_only_when_they_differ_from_the_policy(services):
    policy, svc = services
    assert set(svc.state_dict(policy_version=0)) == {"generator"}  # in sync: the policy's weights suffice
    stale = svc.state_dict(policy_version=2)
    assert set(stale) == {"generator", "generator_weights"}
    assert set(svc.state_dict(policy_version=2, step_only=True)) == {"generator"}
    before = {k: v.clone() for k, v in stale["generator_weights"].items()}
    with torch.no_grad():
        for p in svc.generator.model.parameters():
            p.zero_()
    svc.load_state_dict(stale)  # the saved stale weights come back, not the policy's
    assert all(torch.equal(svc.generator.weights_state_dict()[k], v) for k, v in before.items())


def test_submit_samples_now_without_a_submit_method_and_delegates_otherwise(services):
    _, svc = services
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    pending = submit(svc.generator, [[5, 6, 7]], params)
    assert isinstance(pending, Done)
    (group,) = pending.result()
    (want,) = TorchGenerator(svc.generator.model, svc.generator.tokenizer).generate([[5, 6, 7]], params)
    assert [c.token_ids for c in group] == [c.token_ids for c in want]

    class Background:
        def submit(self, prompt_ids, params):
            return Done([["background"]])

    assert submit(Background(), [[1]], params).result() == [["background"]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_staleness": -1}, "max_staleness must be >= 0"),
        ({"tis_cap": 0.9}, "tis_cap must be >= 1"),
        ({"correction": "magic"}, "correction must be 'tis' or 'ppo'"),
    ],
)
def test_staleness_settings_are_checked(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Staleness(**kwargs)
    assert Staleness(max_staleness=1).asynchronous and not Staleness().asynchronous
