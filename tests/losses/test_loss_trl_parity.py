"""Differential tests: every rlforge loss equals TRL 1.16's ``GRPOTrainer._compute_loss`` in value and gradient.

Inputs are float64 and off-policy (ratios e^±2), with full, short and empty rows and a zero-variance group.
TRL knobs per case: ``loss_type``, ``epsilon``/``epsilon_high``, ``beta``, ``importance_sampling_level``,
``delta`` (two-sided clipping = our ``dual_clip``), ``use_bias_correction_kl`` (= our ``kl_times_ratio``),
``max_completion_length`` (= Dr.GRPO's ``max_response_len``) and the SAPO temperatures.
"""

from __future__ import annotations

import pytest
import torch

from rlforge.losses import CISPOLoss, DAPOLoss, DrGRPOLoss, GRPOLoss, GSPOLoss, SAPOLoss

ATOL = 1e-12
# TRL builds SAPO's per-token temperatures from Python floats, a float32 tensor (τ_neg = 1.05 becomes 1.0499999523);
# ``run_trl`` passes fp64 temperatures instead so TRL's formula is fp64 throughout, like rlforge's.
# ``test_sapo_trl_float32_temperatures`` pins the difference TRL's own float32 temperatures make.

# (id, rlforge factory(beta), TRL kwargs)
CASES = [
    ("grpo", lambda b: GRPOLoss(0.2, 0.28, beta=b), dict(loss_type="grpo", epsilon_high=0.28)),
    (
        "grpo-kl-times-ratio",
        lambda b: GRPOLoss(beta=b, kl_times_ratio=True),
        dict(loss_type="grpo", use_bias_correction_kl=True),
    ),
    ("grpo-dual-clip", lambda b: GRPOLoss(beta=b, dual_clip=2.0), dict(loss_type="grpo", delta=2.0)),
    ("dr_grpo", lambda b: DrGRPOLoss(beta=b), dict(loss_type="dr_grpo")),
    (
        "dr_grpo-max-len",
        lambda b: DrGRPOLoss(0.2, 0.28, beta=b, max_response_len=16),
        dict(loss_type="dr_grpo", epsilon_high=0.28, max_completion_length=16),
    ),
    ("dapo", lambda b: DAPOLoss(beta=b), dict(loss_type="dapo", epsilon_high=0.28)),
    (
        "dapo-kl-times-ratio",
        lambda b: DAPOLoss(beta=b, kl_times_ratio=True),
        dict(loss_type="dapo", epsilon_high=0.28, use_bias_correction_kl=True),
    ),
    ("cispo", lambda b: CISPOLoss(beta=b), dict(loss_type="cispo", epsilon_high=5.0)),
    ("cispo-tight", lambda b: CISPOLoss(clip_high=1.5, beta=b), dict(loss_type="cispo", epsilon_high=1.5)),
    ("sapo", lambda b: SAPOLoss(beta=b), dict(loss_type="sapo")),
    (
        "sapo-temps",
        lambda b: SAPOLoss(tau_pos=0.5, tau_neg=2.0, beta=b),
        dict(loss_type="sapo", sapo_temperature_pos=0.5, sapo_temperature_neg=2.0),
    ),
    (
        "gspo",
        lambda b: GSPOLoss(beta=b),
        dict(loss_type="grpo", importance_sampling_level="sequence", epsilon_low=3e-4, epsilon_high=4e-4),
    ),
    (
        "gspo-wide",
        lambda b: GSPOLoss(0.2, 0.3, beta=b),
        dict(loss_type="grpo", importance_sampling_level="sequence", epsilon_high=0.3),
    ),
    (
        "gspo-kl-times-ratio",
        lambda b: GSPOLoss(0.2, 0.3, beta=b, kl_times_ratio=True),
        dict(
            loss_type="grpo",
            importance_sampling_level="sequence",
            epsilon_high=0.3,
            use_bias_correction_kl=True,
        ),
    ),
]


def _value_and_grad(fn, logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = logprobs.clone().requires_grad_(True)
    loss = fn(leaf)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


@pytest.mark.parametrize("per_token_adv", [False, True], ids=["adv-B", "adv-BT"])
@pytest.mark.parametrize("on_policy", [False, True], ids=["off-policy", "on-policy"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize(("name", "factory", "trl_kwargs"), CASES, ids=[c[0] for c in CASES])
def test_matches_trl(name, factory, trl_kwargs, beta, on_policy, per_token_adv, make_batch, run_trl):
    batch = make_batch(seed=len(name), per_token_adv=per_token_adv)
    loss_fn = factory(beta)
    old = None if on_policy else batch["old_logprobs"]

    def ours(lp):
        return loss_fn(lp, batch["ref_logprobs"], batch["advantages"], batch["padding_mask"], old_logprobs=old)

    def theirs(lp):
        return run_trl(batch, lp, beta=beta, on_policy=on_policy, **trl_kwargs)

    value, grad = _value_and_grad(ours, batch["logprobs"])
    ref_value, ref_grad = _value_and_grad(theirs, batch["logprobs"])
    torch.testing.assert_close(value, ref_value, atol=ATOL, rtol=0)
    torch.testing.assert_close(grad, ref_grad, atol=ATOL, rtol=0)
    if name == "gspo" and not on_policy and beta == 0:
        assert grad.abs().sum() == 0  # ε = 3e-4/4e-4: every sequence ratio (e^±0.5) is clipped, as in TRL
    else:
        assert grad.abs().sum() > 0  # the comparison is not vacuous


def test_cases_exercise_clipping(make_batch):
    """The random batch really is off-policy: most tokens lie outside the GRPO trust region [0.8, 1.2]."""
    batch = make_batch(seed=3)
    valid = batch["padding_mask"].bool()
    ratio = torch.exp(batch["logprobs"] - batch["old_logprobs"])[valid]
    assert ((ratio < 0.8) | (ratio > 1.2)).double().mean() > 0.5
    loss = GRPOLoss()
    loss(batch["logprobs"], None, batch["advantages"], batch["padding_mask"], batch["old_logprobs"])
    assert loss.last_metrics["clip_frac"] > 0


def test_dapo_minibatch_normaliser_differs_from_trl(make_batch, run_trl):
    """Pinned difference: TRL's "dapo"/"cispo" divide by the token count of the whole *generation* batch
    (``num_items_in_batch``, rescaled by accumulation steps); rlforge's DAPOLoss/CISPOLoss divide by the tokens
    of the batch passed to ``forward``. They agree when one forward sees the whole batch (``test_matches_trl``);
    on a minibatch of a larger generation batch, TRL's value is ours x (minibatch tokens / batch tokens)."""
    batch = make_batch(seed=5)
    half = {k: v[:4] for k, v in batch.items()}
    full_tokens = batch["padding_mask"].sum().item()
    half_tokens = half["padding_mask"].sum().item()
    args = (half["logprobs"], None, half["advantages"], half["padding_mask"], half["old_logprobs"])
    for ours_fn, trl_kwargs in (
        (DAPOLoss(), dict(loss_type="dapo", epsilon_high=0.28)),
        (CISPOLoss(), dict(loss_type="cispo", epsilon_high=5.0)),
    ):
        ours = ours_fn(*args)
        theirs = run_trl(half, half["logprobs"], num_items_in_batch=full_tokens, **trl_kwargs)
        torch.testing.assert_close(theirs, ours * half_tokens / full_tokens, atol=ATOL, rtol=0)
        assert not torch.isclose(theirs, ours)


def test_sapo_trl_float32_temperatures(make_batch, run_trl):
    """Pinned difference: with τ_neg = 1.05 exactly, TRL's float32 temperatures move the fp64 loss by ~1e-8."""
    batch = make_batch(seed=7)
    args = (batch["logprobs"], None, batch["advantages"], batch["padding_mask"], batch["old_logprobs"])
    ours = SAPOLoss()(*args)
    theirs = run_trl(batch, batch["logprobs"], "sapo", float32_temperatures=True)
    assert 1e-10 < (ours - theirs).abs().item() < 1e-6
    exact = run_trl(batch, batch["logprobs"], "sapo")
    assert (ours - exact).abs().item() <= 1e-12 * exact.abs().item()
