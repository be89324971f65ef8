"""The multi-turn episode loop: token layout, logprob parity with the trainer, masking, failures, rewards."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from rlforge.data.collate import collate_episodes
from rlforge.envs import LocalEnvRunner, Observation, episode_metrics, run_episodes
from rlforge.envs.encoding import ModuleTurnEncoder
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams
from rlforge.generation.factory import build_generator
from rlforge.grpo import GRPOModule
from rlforge.losses import CISPOLoss, DAPOLoss, DrGRPOLoss, GRPOLoss, GSPOLoss, ReinforceLoss
from rlforge.losses.call import call_loss
from rlforge.models import compute_logprobs, load_policy
from tests.envs.scripted_envs import AsyncCountdownEnv, CountdownEnv, FaultyEnv

ROWS = [{"prompt": "Q: What is 12 + 30?\nA:", "target": "42"}, {"prompt": "Q: What is 5 + 61?\nA:", "target": "66"}]


@pytest.fixture(scope="module")
def module():
    m = GRPOModule(group_size=3, sampling=SamplingParams(max_new_tokens=6), environment=CountdownEnv(turns=3))
    m.policy, m.tokenizer = load_policy("rlforge/default-policy")
    return m


def episodes(module, env, rows=ROWS, group_size=3, seed=0):
    torch.manual_seed(seed)
    generator = build_generator("torch", module.policy, module.tokenizer, seed=seed)
    return run_episodes(
        rows, group_size, generator, LocalEnvRunner(env), ModuleTurnEncoder(module), module.sampling,
        seeds=[7 + i for i in range(len(rows))], ids=itertools.count(), reward_mode=env.reward_mode,
    )  # fmt: skip


def test_tokens_are_model_turns_as_sampled_and_observations_tokenised_alone(module):
    (group, _) = episodes(module, CountdownEnv(turns=3))
    tok = module.tokenizer
    for ep in group:
        c = ep.completion
        assert ep.turns == 3 and ep.tool_calls == 3
        assert len(c.token_ids) == len(c.logprobs) == len(c.loss_mask)
        # The observation spans (mask 0) are exactly the tokenised hint texts, in order.
        pairs = zip(c.loss_mask, c.token_ids, strict=True)
        spans = [list(g) for k, g in itertools.groupby(pairs, key=lambda x: x[0]) if k == 0]
        hints = [[t for _, t in span] for span in spans]
        assert len(hints) == 2
        for ids in hints:
            text = tok.decode(ids)
            assert text.startswith(" hint ") and ids == tok(text, add_special_tokens=False)["input_ids"]
        assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.loss_mask, strict=True) if m == 0)
        assert c.prompt_ids == module.encode_prompt(ROWS[0]["prompt"])


def test_trainer_logprobs_equal_sampler_logprobs_on_multi_turn_episodes(module):
    groups = episodes(module, CountdownEnv(turns=3))
    eps = [ep for g in groups for ep in g]
    batch = collate_episodes(eps, module.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _ = compute_logprobs(module.policy, batch.input_ids, batch.attention_mask, batch.prompt_len)
    mask = batch.response_mask.bool()
    assert mask.sum() > 0 and (~mask & batch.attention_mask[:, batch.prompt_len :].bool()).any()  # env tokens exist
    diff = (logprobs - batch.old_logprobs).abs()[mask]
    assert diff.max().item() < 1e-5


@pytest.mark.parametrize(
    "loss",
    [GRPOLoss(beta=0.1), DAPOLoss(), DrGRPOLoss(), CISPOLoss(), GSPOLoss(), ReinforceLoss(clip_ratio=0.2)],
    ids=lambda loss: type(loss).__name__,
)
def test_environment_tokens_get_no_loss_and_no_gradient(module, loss):
    eps = [ep for g in episodes(module, CountdownEnv(turns=3)) for ep in g]
    for i, ep in enumerate(eps):
        ep.advantage = (-1.0) ** i * (1 + i / 10)
        ep.ref_logprobs = [lp - 0.05 for lp in ep.completion.logprobs]
    batch = collate_episodes(eps, module.tokenizer.pad_token_id)
    env_tokens = (batch.response_mask == 0) & batch.attention_mask[:, batch.prompt_len :].bool()
    assert env_tokens.any()

    def loss_and_grad(old, ref):
        logprobs = torch.randn_like(batch.old_logprobs, generator=torch.Generator().manual_seed(0)) * 0.1 - 1.0
        logprobs.requires_grad_(True)
        value = call_loss(loss, logprobs, ref, batch.advantages, batch.response_mask, old)
        (grad,) = torch.autograd.grad(value, logprobs)
        return value.detach(), grad

    value, grad = loss_and_grad(batch.old_logprobs, batch.ref_logprobs)
    assert grad[env_tokens].abs().max().item() == 0.0  # no gradient flows from environment positions
    assert grad[batch.response_mask.bool()].abs().sum() > 0
    garbage = torch.where(env_tokens, torch.full_like(batch.old_logprobs, -30.0), batch.old_logprobs)
    garbage_ref = torch.where(env_tokens, torch.full_like(batch.old_logprobs, 5.0), batch.ref_logprobs)
    value2, grad2 = loss_and_grad(garbage, garbage_ref)  # perturbing environment positions changes nothing
    assert torch.equal(value, value2) and torch.equal(grad, grad2)


def test_same_seed_same_episodes_and_async_environments_match(module):
    a = episodes(module, CountdownEnv(turns=2), seed=3)
    b = episodes(module, AsyncCountdownEnv(turns=2), seed=3)
    assert [[e.completion.token_ids for e in g] for g in a] == [[e.completion.token_ids for e in g] for g in b]


def test_group_episodes_share_the_environment_seed(module):
    (group, other) = episodes(module, CountdownEnv(turns=2))
    hints = {
        module.tokenizer.decode([t for t, m in zip(c.token_ids, c.loss_mask, strict=True) if not m])
        for c in (e.completion for e in group)
    }
    assert len(hints) == 1  # same seed within a group


def test_reward_modes_and_max_turns(module):
    class PerTurn(CountdownEnv):
        def step(self, action):
            result = super().step(action)
            result.reward = 1.0
            return result

    (g,) = episodes(module, PerTurn(turns=5, max_turns=3, reward_mode="sum"), rows=ROWS[:1])
    assert all(ep.turns == 3 and ep.reward == 3.0 for ep in g)  # max_turns ended it; per-turn rewards summed
    (g,) = episodes(module, PerTurn(turns=5, max_turns=3, reward_mode="final"), rows=ROWS[:1])
    assert all(ep.reward == 1.0 for ep in g)


def test_raising_hanging_or_garbage_environments_end_only_their_episode(module):
    rows = [{"prompt": "a", "target": t} for t in ("10", "20", "30", "40")]
    groups = episodes(module, FaultyEnv(turns=2, timeout_s=0.3), rows=rows, group_size=2)
    logged = {name: value for name, (value, _) in episode_metrics(groups).items()}
    errors = {
        r["target"]: [ep.completion.metadata.get("env_error") for ep in g] for r, g in zip(rows, groups, strict=True)
    }
    assert all("RuntimeError: boom" in e for e in errors["10"])
    assert all("timeout_s=0.3" in e for e in errors["20"])
    assert all("expected a StepResult" in e for e in errors["30"])
    assert errors["40"] == [None, None] and all(ep.turns == 2 for ep in groups[3])
    assert all(ep.reward == 0.0 and ep.turns == 1 for g in groups[:3] for ep in g)
    assert logged["env/errors"] == 6.0 and logged["rollout/turns_mean"] == pytest.approx((6 * 1 + 2 * 2) / 8)


def test_a_failed_reset_keeps_the_group_aligned(module):
    class NoReset(CountdownEnv):
        def reset(self, row, seed):
            return 42

    groups = episodes(module, NoReset(), rows=ROWS, group_size=2)
    assert [len(g) for g in groups] == [2, 2]
    assert all(ep.reward == 0.0 and ep.completion.token_ids == [] for g in groups for ep in g)
    batch = collate_episodes([ep for g in groups for ep in g], module.tokenizer.pad_token_id)
    assert batch.response_mask.sum() == 0


def test_observation_role_renders_through_the_chat_template():
    from rlforge.envs.encoding import chat_turn_text

    class Template:
        name_or_path = "fake"

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
            return text + ("<assistant>" if add_generation_prompt else "")

    assert chat_turn_text(Template(), Observation("7", role="tool")) == "</assistant><tool>7</tool><assistant>"

    class Rewriting(Template):
        def apply_chat_template(self, messages, **kwargs):
            return super().apply_chat_template([m for m in messages if m["role"] != "assistant"], **kwargs)

    with pytest.raises(ConfigError, match="rewrites earlier assistant turns"):
        chat_turn_text(Rewriting(), Observation("7"))


def test_an_episode_that_would_overrun_the_context_ends_truncated(module):
    generator = build_generator("torch", module.policy, module.tokenizer, seed=0)
    env = CountdownEnv(turns=50, max_turns=50)
    prompt_len = len(module.encode_prompt(ROWS[0]["prompt"]))
    (group,) = run_episodes(ROWS[:1], 2, generator, LocalEnvRunner(env), ModuleTurnEncoder(module),
                            module.sampling, seeds=[0], max_context=prompt_len + 40)  # fmt: skip
    for ep in group:
        assert ep.completion.truncated and 1 < ep.turns < 50
        assert prompt_len + len(ep.completion.token_ids) <= prompt_len + 40


def test_chat_observations_are_the_templates_turn_between_assistant_turns(module):
    from rlforge.envs.encoding import ModuleTurnEncoder

    chatml = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    chat = GRPOModule(chat_template=True, environment=CountdownEnv())
    chat.policy, chat.tokenizer = module.policy, copy.deepcopy(module.tokenizer)
    chat.tokenizer.chat_template = chatml
    chat.tokenizer.eos_token = "<|im_end|>"  # a chat model's turn ends with its end-of-turn token, sampled
    ids = ModuleTurnEncoder(chat).observation(Observation("7981", role="tool"))
    # After the sampled end-of-turn: the rest of the template's line, the tool turn, the next assistant header.
    expected = "\n<|im_start|>tool\n7981<|im_end|>\n<|im_start|>assistant\n"
    assert ids == chat.tokenizer(expected, add_special_tokens=False)["input_ids"]
