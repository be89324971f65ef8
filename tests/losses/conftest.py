"""Shared fixtures of the loss tests: a random off-policy batch and a TRL ``GRPOTrainer._compute_loss`` driver."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from rlforge.advantages import compute_advantages

LENGTHS = (7, 1, 0, 3, 7, 5, 2, 6)  # full, short and empty rows
GROUP_SIZE = 4  # two groups of four: the second has equal rewards (zero variance)
REWARDS = ((1.0, 0.0, 0.5, 0.0), (1.0, 1.0, 1.0, 1.0))


def random_batch(
    seed: int = 0, per_token_adv: bool = False, dtype: torch.dtype = torch.float64, spread: float = 1.0
) -> dict[str, torch.Tensor]:
    """An off-policy batch: ``|log π_θ - log π_old| ~ spread·N(0,1)``, so ratios range over about e^±2."""
    gen = torch.Generator().manual_seed(seed)
    batch, width = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(width) < torch.tensor(LENGTHS)[:, None]).to(dtype)
    logprobs = -3 * torch.rand(batch, width, generator=gen, dtype=torch.float64) - 0.05
    old = logprobs + spread * torch.randn(batch, width, generator=gen, dtype=torch.float64)
    ref = logprobs + 0.5 * torch.randn(batch, width, generator=gen, dtype=torch.float64)
    advantages = compute_advantages(torch.tensor(REWARDS, dtype=torch.float64)).reshape(-1)
    if per_token_adv:
        advantages = advantages[:, None] + 0.3 * torch.randn(batch, width, generator=gen, dtype=torch.float64)
        advantages[GROUP_SIZE:] = 0.0  # the zero-variance group stays at 0
    return {
        "logprobs": logprobs.to(dtype),
        "old_logprobs": old.to(dtype),
        "ref_logprobs": ref.to(dtype),
        "advantages": advantages.to(dtype),
        "padding_mask": mask,
    }


@pytest.fixture
def make_batch() -> Callable[..., dict[str, torch.Tensor]]:
    return random_batch


class _Accelerator:
    """The slice of ``accelerate.Accelerator`` that ``_compute_loss`` uses, for one process."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x

    gather_for_metrics = gather

    def reduce(self, x: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return x


def trl_loss(
    batch: dict[str, torch.Tensor],
    logprobs: torch.Tensor,
    loss_type: str,
    *,
    on_policy: bool = False,
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    importance_sampling_level: str = "token",
    delta: float | None = None,
    use_bias_correction_kl: bool = False,
    max_completion_length: int | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    num_items_in_batch: float | None = None,
    float32_temperatures: bool = False,
) -> torch.Tensor:
    """Runs TRL's ``GRPOTrainer._compute_loss`` on ``batch`` with ``logprobs`` standing in for the model output.

    TRL builds SAPO's temperatures with ``torch.where(adv > 0, τ_pos, τ_neg)`` on Python floats, which makes a
    float32 tensor (τ_neg = 1.05 becomes 1.0499999523). Unless ``float32_temperatures``, the temperatures are
    passed as 0-dim tensors of the inputs' dtype, so TRL's formula runs in fp64 end to end.
    """
    if not float32_temperatures:
        sapo_temperature_pos = torch.tensor(sapo_temperature_pos, dtype=logprobs.dtype)
        sapo_temperature_neg = torch.tensor(sapo_temperature_neg, dtype=logprobs.dtype)
    from trl.trainer.grpo_trainer import GRPOTrainer

    trainer = GRPOTrainer.__new__(GRPOTrainer)
    width = logprobs.shape[1]
    trainer.__dict__.update(
        loss_type=loss_type,
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        importance_sampling_level=importance_sampling_level,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        aux_loss_enabled=False,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        _entropy_bonus_enabled=False,
        max_completion_length=max_completion_length or width,
        current_gradient_accumulation_steps=1,
        model=SimpleNamespace(training=True),
        accelerator=_Accelerator(),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(
            use_bias_correction_kl=use_bias_correction_kl,
            delta=delta,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
            steps_per_generation=1,
        ),
    )
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (
        logprobs,
        torch.zeros_like(logprobs.detach()),
        None,
    )
    mask = batch["padding_mask"]
    rows = mask.shape[0]
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": batch["advantages"],
        "ref_per_token_logps": batch["ref_logprobs"],
        "num_items_in_batch": mask.sum() if num_items_in_batch is None else torch.tensor(num_items_in_batch),
    }
    if not on_policy:
        inputs["old_per_token_logps"] = batch["old_logprobs"]
    return trainer._compute_loss(None, inputs)


@pytest.fixture
def run_trl() -> Callable[..., torch.Tensor]:
    pytest.importorskip("trl")
    return trl_loss
