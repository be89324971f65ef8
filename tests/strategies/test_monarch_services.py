"""MonarchStrategy's services (``trainer.services``) on one prepared trainer (one set of processes for the module).

References are computed in-process with the same weights: ``LocalStrategy``'s pieces, ``RewardRunner``
and ``compute_logprobs``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge import GRPOModule, RLDataModule, RLTrainer, SamplingParams, TorchGenerator
from rlforge.data import collate_episodes
from rlforge.errors import WorkerError
from rlforge.losses import GRPOLoss
from rlforge.models import compute_logprobs
from rlforge.strategies import MonarchStrategy, ServiceConfig
from rlforge.types import Episode


@pytest.fixture(scope="module")
def prepared(tiny_policy_dir):
    strategy = MonarchStrategy(
        generator=ServiceConfig(num_replicas=2), reward=ServiceConfig(num_replicas=1, procs=2), sync_transport="rdma"
    )
    module = GRPOModule(model=tiny_policy_dir, group_size=3, loss=GRPOLoss(beta=0.1), reward_fns=[len_reward])
    trainer = RLTrainer(max_steps=1, strategy=strategy, logger=False, enable_progress_bar=False, seed=3)
    trainer.prepare(module, RLDataModule(batch_size=4))
    yield trainer, module, trainer.services
    strategy.teardown()


def _rollout(module, services, rows):
    prompt_ids = [module.encode_prompt(row["prompt"]) for row in rows]
    completions = services.generator.generate(prompt_ids, module.sampling)
    return [[Episode(r["prompt"], r["target"], c) for c in group] for r, group in zip(rows, completions, strict=True)]


def len_reward(prompt: str, response: str, target: str) -> float:
    return float(len(response) % 3)


def test_replicas_sample_their_shard_like_a_local_generator_with_the_same_seed(prepared):
    trainer, module, services = prepared
    prompts = [module.encode_prompt(f"{a} + {a} =") for a in range(5)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, n=2)
    remote = services.generator.generate(prompts, params)
    # Replica i owns a contiguous shard and samples with seed trainer.seed + 1000 * i.
    local0 = TorchGenerator(module.policy, module.tokenizer, seed=3).generate(prompts[:2], params)
    local1 = TorchGenerator(module.policy, module.tokenizer, seed=1003).generate(prompts[2:], params)
    expected = local0 + local1
    assert [[c.token_ids for c in g] for g in remote] == [[c.token_ids for c in g] for g in expected]
    for got, want in zip(remote, expected, strict=True):
        for a, b in zip(got, want, strict=True):
            assert a.policy_version == 0
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_weight_sync_versions_acks_and_freeing(prepared):
    trainer, module, services = prepared
    with torch.no_grad():
        for p in module.policy.parameters():
            p.add_(0.01)
    logged = {}
    services.sync(1, lambda name, value, reduce=None: logged.setdefault(name, value))
    services.sync(2, lambda *a, **k: None)
    assert services.generator.policy_version == 2
    assert services.generator.live_versions == [2]  # versions 0 and 1 freed after both replicas acked 2
    assert logged["perf/sync_bytes"] == sum(p.numel() * 4 for p in module.policy.state_dict().values())
    prompts = [module.encode_prompt("7 + 8 =")]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    (remote,) = services.generator.generate(prompts, greedy)
    (local,) = TorchGenerator(module.policy, module.tokenizer).generate(prompts, greedy)
    assert remote[0].token_ids == local[0].token_ids and remote[0].policy_version == 2


def test_reference_actor_keeps_the_initial_weights(prepared, tiny_policy_dir):
    from rlforge.models import load_policy

    trainer, module, services = prepared
    initial, _ = load_policy(tiny_policy_dir)
    prompts = [module.encode_prompt("1 + 2 ="), module.encode_prompt("30 + 4 =")]
    rows = [{"prompt": "1 + 2 =", "target": "3"}, {"prompt": "30 + 4 =", "target": "34"}]
    groups = _rollout(module, services, rows)
    assert [g[0].completion.prompt_ids for g in groups] == prompts
    batch = collate_episodes([ep for g in groups for ep in g], module.tokenizer.pad_token_id)
    remote = services.reference.logprobs(batch, 1.0)
    local, _ = compute_logprobs(initial, batch.input_ids, batch.attention_mask, batch.prompt_len, 1.0)
    assert torch.allclose(remote * batch.response_mask, local * batch.response_mask, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("compile", "precision"), [(True, "32-true"), (False, "bf16-mixed")])
def test_reference_actor_runs_the_modules_forward_settings(tiny_policy_dir, compile, precision):
    """``GRPOModule(compile=True)`` and ``precision`` reach the reference actor, whose logprobs equal the
    in-process forward of the same settings (compiled: the eager one)."""
    strategy = MonarchStrategy(reward=ServiceConfig(num_replicas=0))
    module = GRPOModule(
        model=tiny_policy_dir, group_size=2, loss=GRPOLoss(beta=0.1), compile=compile, precision=precision
    )
    trainer = RLTrainer(max_steps=1, strategy=strategy, logger=False, enable_progress_bar=False, seed=3)
    try:
        trainer.prepare(module, RLDataModule(batch_size=2))
        services = trainer.services
        rows = [{"prompt": "1 + 2 =", "target": "3"}, {"prompt": "30 + 4 =", "target": "34"}]
        groups = _rollout(module, services, rows)
        batch = collate_episodes([ep for g in groups for ep in g], module.tokenizer.pad_token_id)
        remote = services.reference.logprobs(batch, 1.0)
        state = services.reference.replica.actor.state.call_one().get(timeout=60)
        inputs = (module.policy, batch.input_ids, batch.attention_mask, batch.prompt_len, 1.0)
        local, _ = compute_logprobs(*inputs, precision=precision)
        fp32, _ = compute_logprobs(*inputs)
    finally:
        strategy.teardown()
    assert state["compile"] is compile and state["precision"] == precision
    mask = batch.response_mask
    assert torch.allclose(remote * mask, local * mask, atol=1e-5)
    assert (precision == "bf16-mixed") == bool(((remote - fp32) * mask).abs().max() > 1e-4)


def test_reward_workers_match_the_in_process_runner(prepared):
    trainer, module, services = prepared
    rows = [{"prompt": f"{a} + 1 =", "target": str(a + 1)} for a in range(5)]
    groups = _rollout(module, services, rows)
    metrics = module.score(groups, scorer=services.scorer)
    episodes = [ep for g in groups for ep in g]
    local = module.reward_runner(
        [e.prompt for e in episodes], [e.completion.text for e in episodes], [e.target for e in episodes]
    )
    assert [e.reward for e in episodes] == local.rewards
    assert metrics == pytest.approx(local.metrics)


def test_actor_exception_is_a_worker_error_with_the_remote_traceback(prepared):
    trainer, module, services = prepared
    with pytest.raises(WorkerError, match=r"generator replica \d: generate raised ValueError") as info:
        services.generator.generate([[]], SamplingParams(max_new_tokens=2))
    assert "Traceback" in str(info.value) and "torch_generator.py" in str(info.value)
    # The actor lives on.
    assert len(services.generator.generate([[5]], SamplingParams(max_new_tokens=2))) == 1
