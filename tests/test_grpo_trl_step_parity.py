"""One GRPO step of rlforge and of TRL 1.16's ``GRPOTrainer``, fed the same rollouts, moves the policy the same way.

TRL samples through its public ``rollout_func``, which here hands back the completions rlforge sampled for each
prompt, so both sides score, normalise advantages, forward, backward, clip and step on identical data. That covers
everything between sampled token ids and updated weights that the loss-only parity tests
(``tests/losses/test_loss_trl_parity.py``) do not: rewards -> group advantages, the EOS and padding masks, rlforge's
packed forward (one shared prompt per group) against TRL's padded HF forward, the ``grpo`` normaliser, gradient
clipping and AdamW. If rlforge learned differently per step from TRL on the same data, this is where it would show.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlforge import Callback
from rlforge.losses import GRPOLoss
from rlforge.models import load_policy
from tests.helpers import char_reward
from tests.test_grpo import GROUP, PROMPTS, one_step

pytest.importorskip("trl")

NEW_TOKENS, LR = 6, 1e-3  # one_step's sampling and lr


class _Capture(Callback):
    """Keeps the scored groups and the clipped gradients of rlforge's one step."""

    def on_rollout_end(self, trainer, module, groups) -> None:
        self.groups = groups

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        self.grads = {n: p.grad.detach().clone() for n, p in module.policy.named_parameters()}


def _rlforge_step(policy: str, root: str, grad_clip: float) -> tuple[_Capture, torch.nn.Module, dict[str, float]]:
    capture = _Capture()
    module = one_step(
        policy,
        root,
        reward=char_reward,
        trainer_args={"grad_clip": grad_clip, "callbacks": [capture]},
        loss=GRPOLoss(clip_low=0.2, clip_high=0.2, beta=0.0),  # TRL loss_type="grpo", epsilon 0.2
    )
    return capture, module.policy, module.metrics


def _trl_step(policy: str, out: str, groups, grad_clip: float) -> tuple[dict[str, torch.Tensor], Any, list[dict]]:
    """TRL's one step on ``groups``' prompts, with ``groups``' completions as its rollouts."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    by_prompt = {group[0].prompt: [e.completion for e in group] for group in groups}
    assert len(by_prompt) == PROMPTS  # distinct prompts: the lookup below is unambiguous
    served: dict[str, int] = {}

    def rollout_func(prompts: list[str], trainer) -> dict[str, list]:
        # TRL repeats each prompt GROUP times in a row; serve that prompt's completions in order.
        completions = []
        for prompt in prompts:
            i = served.get(prompt, 0)
            completions.append(by_prompt[prompt][i])
            served[prompt] = i + 1
        return {
            "prompt_ids": [c.prompt_ids for c in completions],
            "completion_ids": [c.token_ids for c in completions],
            "logprobs": [c.logprobs for c in completions],
        }

    def reward(prompts, completions, target, **kwargs):
        return [char_reward(p, c, t) for p, c, t in zip(prompts, completions, target, strict=True)]

    class Capture(TrainerCallback):
        """Keeps TRL's clipped gradients and its logged metrics (``grad_norm`` is the norm before clipping)."""

        def __init__(self) -> None:
            self.logs: list[dict] = []

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    capture = Capture()
    config = GRPOConfig(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        loss_type="grpo",
        beta=0.0,
        epsilon=0.2,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=grad_clip,
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    model, tokenizer = load_policy(policy)
    rows = [{"prompt": g[0].prompt, "target": g[0].target} for g in groups]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=rollout_func,
        callbacks=[capture],
    )
    trainer.train()
    assert served == {prompt: GROUP for prompt in by_prompt}  # TRL trained on exactly rlforge's rollouts
    return capture.grads, model, capture.logs


@pytest.mark.slow
@pytest.mark.parametrize("grad_clip", [1e9, 0.05], ids=["unclipped", "clipped"])
def test_one_step_matches_trl_on_the_same_rollouts(tiny_policy_dir, tmp_path, monkeypatch, grad_clip):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16
    capture, ours, metrics = _rlforge_step(tiny_policy_dir, str(tmp_path / "rlforge"), grad_clip)
    rewards = [e.reward for g in capture.groups for e in g]
    assert 0 < sum(rewards) < len(rewards)  # some groups have a non-zero advantage: there is a gradient
    assert any(c.completion.stop_reason == "stop" for g in capture.groups for c in g)  # EOS rows are covered
    theirs_grads, theirs, logs = _trl_step(tiny_policy_dir, str(tmp_path / "trl"), capture.groups, grad_clip)

    # The norm of TRL's gradient before clipping, and rlforge's, agree; with clipping both scaled to grad_clip.
    trl_log = next(log for log in logs if "grad_norm" in log)
    assert trl_log["reward"] == pytest.approx(sum(rewards) / len(rewards))  # TRL scored the same texts alike
    trl_norm = trl_log["grad_norm"]
    assert metrics["train/grad_norm"] == pytest.approx(trl_norm, rel=1e-4)
    if grad_clip < 1:
        assert trl_norm > grad_clip  # the clipped case does clip
    scale = max(max(theirs_grads[n].abs().max().item() for n in theirs_grads), 1e-12)
    for name, grad in capture.grads.items():
        torch.testing.assert_close(grad, theirs_grads[name], rtol=1e-4, atol=1e-5 * scale, msg=name)
    # AdamW's first step moves each weight by lr * g / (|g| + eps): +-lr wherever the gradient is clear of fp noise,
    # which must agree; where |g| is ~1e-9 (the two forwards' rounding) it may differ, but by at most 2 lr.
    initial = dict(load_policy(tiny_policy_dir)[0].named_parameters())
    moved = 0
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        clear = capture.grads[name].abs() > 1e-4 * scale
        torch.testing.assert_close(a[clear], b[clear], rtol=0, atol=1e-6, msg=name)
        assert (a - b).abs().max() <= 2 * LR, name
        moved += int(((a - initial[name]).abs() > 0.5 * LR).sum())
    assert moved > 1000  # the step did move the policy
