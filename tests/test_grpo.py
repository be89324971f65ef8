"""``GRPOModule(skip_zero_advantage=True)``: the update without the zero-advantage rows equals the full update."""

from __future__ import annotations

import pytest
import torch

from rlforge import GRPOModule, RLTrainer
from rlforge.cli import main
from rlforge.data import RLDataModule
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams
from rlforge.losses import CISPOLoss, DAPOLoss, DrGRPOLoss, GRPOLoss, GSPOLoss, PolicyLoss, SimpleGRPOLoss
from rlforge.strategies import LocalStrategy
from tests.helpers import fast_flags, metric_rows, odd_target_reward
from tests.reliability.test_config_cli import _cli, _one_line_error

PROMPTS, GROUP = 4, 4


def zero_reward(prompt: str, response: str, target: str) -> float:
    return 0.0


class Recording(GRPOModule):
    """Records the rows of each training forward, the gradients of its backward and the step's metrics."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[int] = []
        self.advantages: list[torch.Tensor] = []
        self.grads: dict[str, torch.Tensor] = {}
        self.grad_steps: list[dict[str, torch.Tensor]] = []
        self.metrics: dict[str, float] = {}

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self.advantages.append(batch.advantages.clone())

    def training_step(self, batch):
        self.rows.append(len(batch))
        return super().training_step(batch)

    def on_after_backward(self) -> None:  # before the gradient clipping, which would hide a scale error
        self.grads = {n: p.grad.clone() for n, p in self.policy.named_parameters() if p.grad is not None}
        self.grad_steps.append(self.grads)

    def on_train_step_end(self, metrics: dict[str, float]) -> None:
        self.metrics = metrics


def one_step(policy: str, root, reward=odd_target_reward, trainer_args: dict | None = None, **kwargs) -> Recording:
    module = Recording(
        model=policy,
        group_size=GROUP,
        sampling=SamplingParams(max_new_tokens=6, temperature=1.0),
        reward_fns=[reward],
        lr=1e-3,
        **kwargs,
    )
    trainer = RLTrainer(
        strategy=LocalStrategy(),
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        val_check_interval=None,
        val_at_start=False,
        seed=0,
        default_root_dir=str(root),
        **(trainer_args or {}),
    )
    trainer.prepare(module, RLDataModule(task="addition", batch_size=PROMPTS, seed=0))
    trainer.run_step()
    return module


@pytest.mark.parametrize(
    "make_loss",
    [
        lambda: GRPOLoss(beta=0.0),  # seq-mean-token-mean
        DAPOLoss,  # token-mean
        DrGRPOLoss,  # seq-mean-token-sum-norm over the padded width
        lambda: DrGRPOLoss(max_response_len=6),  # ... over a constant length
        GSPOLoss,  # a sequence-level ratio
        CISPOLoss,
        lambda: SimpleGRPOLoss(beta=0.0),
    ],
)
def test_skipping_zero_advantage_rows_leaves_the_gradient_unchanged(tiny_policy_dir, tmp_path, make_loss):
    full = one_step(tiny_policy_dir, tmp_path / "full", loss=make_loss())
    skip = one_step(tiny_policy_dir, tmp_path / "skip", loss=make_loss(), skip_zero_advantage=True)
    (advantages,) = full.advantages
    assert torch.equal(advantages, skip.advantages[0])  # the same rollout on both sides
    nonzero = int(advantages.ne(0).sum())
    assert 0 < nonzero < len(advantages), "the batch must mix zero and non-zero advantages"
    assert full.rows == [len(advantages)] and skip.rows == [nonzero]
    assert skip.metrics["train/skipped_rows_frac"] == pytest.approx(1 - nonzero / len(advantages))
    assert full.grads.keys() == skip.grads.keys() and len(full.grads) > 10
    for name, grad in full.grads.items():  # fp32 summation order differs with the rows
        assert (skip.grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max() + 1e-12, name
    # On-policy the loss is ~0 (ratio 1, centred advantages): equal up to fp32 rounding.
    assert skip.metrics["train/loss"] == pytest.approx(full.metrics["train/loss"], rel=1e-5, abs=1e-7)


def test_skip_over_ppo_epochs_of_minibatches_leaves_every_update_unchanged(tiny_policy_dir, tmp_path):
    """Two passes of two minibatches: ratios leave 1 after the first optimizer step, clipping acts, and each
    minibatch skips its own zero rows. SGD, so tiny fp32 differences are not blown up to ``lr`` as AdamW's first
    step does with near-zero gradients."""
    trainer_args = {"ppo_epochs": 2, "minibatch_size": PROMPTS * GROUP // 2}

    def sgd(params):
        return torch.optim.SGD(params, lr=0.5)

    settings = {"trainer_args": trainer_args, "optimizer": sgd}
    full = one_step(tiny_policy_dir, tmp_path / "full", **settings)
    skip = one_step(tiny_policy_dir, tmp_path / "skip", **settings, skip_zero_advantage=True)
    assert len(full.grad_steps) == len(skip.grad_steps) == 4
    assert all(torch.equal(a, b) for a, b in zip(full.advantages, skip.advantages, strict=True))
    assert sum(full.rows) > sum(skip.rows)
    for step, (ours, reference) in enumerate(zip(skip.grad_steps, full.grad_steps, strict=True)):
        for name, grad in reference.items():
            assert (ours[name] - grad).abs().max() <= 1e-4 * grad.abs().max() + 1e-12, (step, name)


def test_all_zero_advantages_still_step_the_optimizer_on_exact_zero_gradients(tiny_policy_dir, tmp_path):
    module = one_step(tiny_policy_dir, tmp_path, reward=zero_reward, skip_zero_advantage=True)
    assert module.rows == [1] and module.metrics["train/skipped_rows_frac"] == pytest.approx(1 - 1 / 16)
    assert module.grads and all(torch.count_nonzero(g) == 0 for g in module.grads.values())
    assert module.trainer.progress.optimizer_steps == 1


@pytest.mark.parametrize("setting", [{"entropy_coef": 0.01}, {"loss": GRPOLoss(beta=0.05)}])
def test_no_skip_when_zero_advantage_rows_still_have_a_gradient(tiny_policy_dir, tmp_path, setting):
    """An entropy bonus or a KL penalty gives every row a gradient: the whole batch trains."""
    module = one_step(tiny_policy_dir, tmp_path, skip_zero_advantage=True, **setting)
    assert module.rows == [PROMPTS * GROUP] and "train/skipped_rows_frac" not in module.metrics


def test_skip_needs_a_loss_that_declares_an_advantage_weighted_gradient():
    class Custom(torch.nn.Module):
        def forward(self, logprobs, ref_logprobs, advantages, padding_mask):
            return -(logprobs * padding_mask).mean()  # no advantage in it: every row has a gradient

    class Subclass(PolicyLoss):  # a PolicyLoss does not inherit the declaration
        def forward(self, logprobs, ref_logprobs, advantages, padding_mask, old_logprobs=None):
            return logprobs.sum()

    for loss in (Custom(), Subclass()):
        with pytest.raises(ConfigError, match="module.skip_zero_advantage needs a loss"):
            GRPOModule(loss=loss, skip_zero_advantage=True)
    GRPOModule(loss=Custom())  # fine without the skip


def test_skip_zero_advantage_from_the_command_line(tiny_policy_dir, tmp_path):
    main(["fit", *fast_flags(tiny_policy_dir, tmp_path, module__skip_zero_advantage="true")])
    rows = metric_rows(tmp_path, "train/skipped_rows_frac")
    assert len(rows) == 2 and all(0.0 <= float(r["train/skipped_rows_frac"]) < 1.0 for r in rows)


def test_skip_with_a_loss_that_does_not_declare_it_is_one_line_and_exit_2(tmp_path):
    flags = ["--module.loss", "rlforge.losses.PolicyLoss", "--module.skip_zero_advantage", "true"]
    line = _one_line_error(_cli("fit", *flags, "--trainer.default_root_dir", str(tmp_path)))
    assert "module.skip_zero_advantage" in line and "PolicyLoss does not declare it" in line
