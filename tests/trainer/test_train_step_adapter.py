"""The seed's dict format: `trainer.train_step(inputs, targets) -> float` equals the TrainBatch path."""

from __future__ import annotations

import copy

import pytest
import torch

from rlforge import GRPOModule, RLTrainer
from rlforge.data import collate_episodes
from rlforge.errors import ConfigError
from rlforge.losses import SimpleGRPOLoss
from rlforge.types import Completion, Episode
from tests.helpers import char_reward


def _episodes(tokenizer) -> list[Episode]:
    prompts = ["Q: What is 3 + 5?\nA:", "Q:"]
    out = []
    for i, prompt in enumerate(prompts * 2):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response = [5 + i, 6, 7][: 1 + i % 3]
        completion = Completion(text="", token_ids=response, logprobs=[-1.0] * len(response), prompt_ids=ids)
        out.append(Episode(prompt=prompt, target="8", completion=completion, advantage=float(i) - 1.5))
    return out


def test_train_step_matches_trainbatch_loss(tiny_policy_dir, tmp_path):
    module = GRPOModule(model=tiny_policy_dir, group_size=2, loss=SimpleGRPOLoss(beta=0.1), reward_fns=[char_reward])
    trainer = RLTrainer(default_root_dir=str(tmp_path), enable_progress_bar=False, grad_clip=None)
    trainer.prepare(module)
    pad = module.tokenizer.pad_token_id
    batch = collate_episodes(_episodes(module.tokenizer), pad)
    batch.ref_logprobs = torch.full_like(batch.response_mask, -1.5)
    inputs = [{"tokens": batch.input_ids}]
    targets = [
        {
            "response": batch.response_ids,
            "ref_logprobs": batch.ref_logprobs,
            "advantages": batch.advantages[:, None],
            "padding_mask": batch.response_mask,
        }
    ]
    reference = copy.deepcopy(module)
    on_policy = batch.__class__(**{**batch.__dict__, "old_logprobs": None})
    expected = float(reference.training_step(on_policy).detach())
    before = [p.detach().clone() for p in module.policy.parameters()]
    assert trainer.train_step(inputs, targets) == pytest.approx(expected, abs=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.policy.parameters(), strict=True))  # a step ran


def test_train_step_rejects_inconsistent_dicts(tiny_policy_dir, tmp_path):
    module = GRPOModule(model=tiny_policy_dir, group_size=2, reward_fns=[char_reward])
    trainer = RLTrainer(default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.prepare(module)
    tokens = torch.ones(2, 6, dtype=torch.long)
    with pytest.raises(ConfigError, match="padding_mask"):
        trainer.train_step([{"tokens": tokens}], [{"response": tokens[:, 3:], "advantages": torch.zeros(2)}])
