"""The seed's own code blocks (torchforge's workflow and API pages) run verbatim against rlforge.

Each block below is copied as the seed writes it; only the imports say ``rlforge`` where the seed says ``forge``.
Values are checked against formulas written out here by hand, never against rlforge's own output.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import fields

import torch
import torch.nn as nn

from rlforge import GRPOModule, RLDataModule, RLTrainer
from rlforge.data import collate_episodes
from rlforge.types import Completion, Episode


# The seed's blocks keep the seed's own formatting.
# fmt: off
# ---- workflow 2, step 1: the seed's custom loss, verbatim ------------------------------------------------------
class CustomLoss(nn.Module):
    def __init__(self, clip_range: float = 0.2, beta: float = 0.1):
        super().__init__()
        self.clip_range = clip_range
        self.beta = beta

    def forward(
        self,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        padding_mask: torch.Tensor,
    ) -> torch.Tensor:
        # Compute importance ratio
        ratio = torch.exp(logprobs - ref_logprobs)

        # Clipped policy gradient
        clipped_ratio = torch.clamp(
            ratio,
            1 - self.clip_range,
            1 + self.clip_range
        )
        pg_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)

        # KL penalty
        kl = ref_logprobs - logprobs

        # Apply mask and aggregate
        masked_loss = (pg_loss + self.beta * kl) * padding_mask
        loss = masked_loss.sum() / padding_mask.sum()

        return loss


# ---- workflow 1, step 2: the seed's custom reward, verbatim -----------------------------------------------------
class CustomMathReward:
    def __call__(self, prompt: str, response: str, target: str) -> float:
        # Extract answer from response
        match = re.search(r'\\boxed{([^}]+)}', response)
        if not match:
            return 0.0

        answer = match.group(1).strip()
        return 1.0 if answer == target else 0.0
# fmt: on


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(3, 4, generator=gen, dtype=torch.float64) - 0.1
    return {
        "logprobs": logprobs,
        "ref_logprobs": logprobs - 0.3 * torch.randn(3, 4, generator=gen, dtype=torch.float64),
        "advantages": torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64),
        "padding_mask": torch.ones(3, 4, dtype=torch.float64),  # full rows: token-mean == seq-mean-token-mean
    }


def test_simple_grpo_loss_as_the_seed_calls_it():
    from rlforge.losses import ReinforceLoss, SimpleGRPOLoss

    x = _inputs()
    logprobs, ref_logprobs, advantages, padding_mask = (
        x["logprobs"],
        x["ref_logprobs"],
        x["advantages"],
        x["padding_mask"],
    )

    # fmt: off
    # SimpleGRPOLoss for GRPO training
    loss_fn = SimpleGRPOLoss(beta=0.1)

    loss = loss_fn(
        logprobs=logprobs,
        ref_logprobs=ref_logprobs,
        advantages=advantages,
        padding_mask=padding_mask
    )
    # fmt: on

    # By hand: on-policy ratio is 1, k3 KL, each token -(A - beta * k3), averaged.
    expected = 0.0
    for b in range(3):
        for t in range(4):
            d = float(ref_logprobs[b, t] - logprobs[b, t])
            expected += -(float(advantages[b]) - 0.1 * (math.exp(d) - d - 1))
    assert float(loss) == expected / 12 or abs(float(loss) - expected / 12) < 1e-12
    assert ReinforceLoss is not None


def test_reinforce_loss_clip_ratio_as_the_seed_writes_it():
    # ReinforceLoss with optional importance ratio clipping
    from rlforge.losses.reinforce_loss import ReinforceLoss

    loss_fn = ReinforceLoss(clip_ratio=0.2)

    x = _inputs(1)
    logprobs = x["logprobs"].clone().requires_grad_(True)
    old = logprobs.detach() + torch.tensor([[0.5, -0.5, 0.0, 0.05]], dtype=torch.float64)  # ratios e^-0.5, e^0.5
    loss = loss_fn(logprobs, None, x["advantages"], x["padding_mask"], old_logprobs=old)
    # By hand: the detached IS weight is clipped to [1 - 0.2, 1 + 0.2]; loss = mean(-w * A * logprob).
    expected = 0.0
    for b in range(3):
        for t in range(4):
            w = min(max(math.exp(float(logprobs[b, t] - old[b, t])), 0.8), 1.2)
            expected += -w * float(x["advantages"][b]) * float(logprobs[b, t])
    assert abs(float(loss) - expected / 12) < 1e-12
    (grad,) = torch.autograd.grad(loss, logprobs)
    w = torch.exp(logprobs.detach() - old).clamp(0.8, 1.2)
    assert torch.allclose(grad, -w * x["advantages"][:, None] / 12, atol=1e-14)  # clipped tokens keep a gradient


def test_completion_as_the_seed_builds_it():
    completion = Completion(text="#### 8", token_ids=[5, 6], logprobs=[-0.1, -0.2], metadata={"sampler": "vllm"})
    assert completion.metadata == {"sampler": "vllm"}
    assert {"text", "token_ids", "logprobs", "metadata"} <= {f.name for f in fields(Completion)}


def test_custom_loss_trains_in_fit_and_from_python(tiny_policy_dir, tmp_path):
    # workflow 2, step 2: the loss object is what the module calls; the reward is workflow 1's class.
    loss_fn = CustomLoss(clip_range=0.2, beta=0.1)
    calls = []

    def record(mod, args, kwargs, out):  # the arguments by name, however the module passed them
        calls.append((inspect.signature(mod.forward).bind(*args, **kwargs).arguments, out))

    loss_fn.register_forward_hook(record, with_kwargs=True)
    module = GRPOModule(model=tiny_policy_dir, loss=loss_fn, group_size=2, reward_fns=[CustomMathReward()])
    trainer = RLTrainer(
        max_steps=2, default_root_dir=str(tmp_path), enable_progress_bar=False, val_check_interval=0, logger=False
    )
    trainer.fit(module, RLDataModule(task="addition", batch_size=2))
    assert trainer.global_step == 2 and calls
    kwargs, out = calls[0]
    assert kwargs["ref_logprobs"] is not None  # the seed's loss reads ref_logprobs unconditionally
    assert torch.isfinite(out)
    # The value the trainer got is the seed formula applied to the arguments it passed.
    again = CustomLoss(clip_range=0.2, beta=0.1)(
        kwargs["logprobs"].detach(), kwargs["ref_logprobs"], kwargs["advantages"], kwargs["padding_mask"]
    )
    assert torch.allclose(out.detach(), again)


def test_train_step_with_the_seed_dict_format(tiny_policy_dir, tmp_path):
    from rlforge.losses import SimpleGRPOLoss

    module = GRPOModule(model=tiny_policy_dir, group_size=2, loss=SimpleGRPOLoss(beta=0.1))
    trainer = RLTrainer(default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False)
    trainer.prepare(module)
    tok = module.tokenizer
    episodes = []
    for i, prompt in enumerate(["Q: What is 3 + 5?\nA:", "Q: 1 + 1?\nA:"]):
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        completion = Completion(text="", token_ids=[7, 8, 9], logprobs=[-1.0] * 3, prompt_ids=ids)
        episodes.append(Episode(prompt=prompt, target="8", completion=completion, advantage=1.0 - 2 * i))
    batch = collate_episodes(episodes, tok.pad_token_id)

    # fmt: off
    # inputs: list of dicts with torch.Tensor values
    inputs = [{"tokens": batch.input_ids}]

    # targets: list of dicts with training signals
    targets = [{
        "response": batch.response_ids,
        "ref_logprobs": torch.full(batch.response_ids.shape, -1.0),
        "advantages": batch.advantages,
        "padding_mask": batch.response_mask
    }]

    # train_step returns loss as float
    loss = trainer.train_step(inputs, targets)
    # fmt: on

    assert isinstance(loss, float) and math.isfinite(loss)
