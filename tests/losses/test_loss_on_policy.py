"""With ``old_logprobs=None`` (ratio = 1, gradient still flowing) every loss is on-policy REINFORCE.

REINFORCE is written in one of its two standard surrogates, both with gradient ``-Â ∇log π`` per token:

* ratio form ``ℓ = -Â · exp(log π - sg(log π))`` (value ``-Â``): GRPO, Dr.GRPO, DAPO, GSPO, SimpleGRPO;
* log-prob form ``ℓ = -Â · log π`` (value ``-Â log π``): CISPO, Reinforce (their losses are written this way);

aggregated with the loss's own mode. We check value and gradient exactly. SAPO: gradient identical to the ratio
form; value scaled per token by ``f(1) = 2/τ`` (``τ = τ_pos`` if ``Â > 0`` else ``τ_neg``), i.e. it equals the
ratio form with advantages ``2Â/τ``. GSPO: with sequence-level advantages ``[B]`` (its definition); with
per-token advantages it is not REINFORCE (every token's gradient sees the sequence's mean advantage).
"""

from __future__ import annotations

import pytest
import torch

from rlforge.losses import (
    AGGREGATION_MODES,
    CISPOLoss,
    DAPOLoss,
    DrGRPOLoss,
    GRPOLoss,
    GSPOLoss,
    ReinforceLoss,
    SAPOLoss,
    SimpleGRPOLoss,
    aggregate,
)


def reinforce(lp, adv, mask, mode, form="ratio", max_len=None):
    if adv.dim() == 1:
        adv = adv[:, None]
    surrogate = torch.exp(lp - lp.detach()) if form == "ratio" else lp
    return aggregate(-adv * surrogate, mask, mode, max_len)


CASES = [
    *[(f"grpo-{m}", lambda m=m: GRPOLoss(aggregation=m), m, "ratio", None) for m in AGGREGATION_MODES],
    ("grpo-dual-clip", lambda: GRPOLoss(0.1, 0.3, dual_clip=3.0), "seq-mean-token-mean", "ratio", None),
    ("dr_grpo", lambda: DrGRPOLoss(), "seq-mean-token-sum-norm", "ratio", None),
    ("dr_grpo-max-len", lambda: DrGRPOLoss(max_response_len=20), "seq-mean-token-sum-norm", "ratio", 20),
    ("dapo", lambda: DAPOLoss(), "token-mean", "ratio", None),
    ("gspo", lambda: GSPOLoss(), "seq-mean-token-mean", "ratio", None),
    ("simple-grpo", lambda: SimpleGRPOLoss(beta=0.0), "seq-mean-token-mean", "ratio", None),
    ("cispo", lambda: CISPOLoss(), "token-mean", "logprob", None),
    ("cispo-floor", lambda: CISPOLoss(clip_high=1.2, clip_low=0.2), "token-mean", "logprob", None),
    ("reinforce", lambda: ReinforceLoss(), "seq-mean-token-mean", "logprob", None),
    ("reinforce-clip", lambda: ReinforceLoss(clip_ratio=2.0), "seq-mean-token-mean", "logprob", None),
]


def _value_grad(fn, lp):
    leaf = lp.clone().requires_grad_(True)
    value = fn(leaf)
    (grad,) = torch.autograd.grad(value, leaf)
    return value.detach(), grad


PARAMS = [
    pytest.param(*case[1:], per_token, id=f"{case[0]}-{'adv-BT' if per_token else 'adv-B'}")
    for case in CASES
    for per_token in (False, True)
    if not (case[0] == "gspo" and per_token)  # GSPO is defined with one advantage per sequence
]


@pytest.mark.parametrize(("factory", "mode", "form", "max_len", "per_token_adv"), PARAMS)
def test_on_policy_equals_reinforce(factory, mode, form, max_len, per_token_adv, make_batch):
    batch = make_batch(seed=21, per_token_adv=per_token_adv)
    adv, mask = batch["advantages"], batch["padding_mask"]
    loss_fn = factory()
    value, grad = _value_grad(lambda lp: loss_fn(lp, None, adv, mask), batch["logprobs"])
    ref_value, ref_grad = _value_grad(lambda lp: reinforce(lp, adv, mask, mode, form, max_len), batch["logprobs"])
    torch.testing.assert_close(value, ref_value, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=0)
    assert grad.abs().sum() > 0
    assert loss_fn.last_metrics["ratio_mean"] == loss_fn.last_metrics["ratio_max"] == 1.0
    assert loss_fn.last_metrics.get("clip_frac", 0.0) == 0.0


@pytest.mark.parametrize("per_token_adv", [False, True], ids=["adv-B", "adv-BT"])
def test_sapo_on_policy_is_scaled_reinforce(per_token_adv, make_batch):
    batch = make_batch(seed=22, per_token_adv=per_token_adv)
    adv, mask = batch["advantages"], batch["padding_mask"]
    tau_pos, tau_neg = 0.8, 1.6
    value, grad = _value_grad(lambda lp: SAPOLoss(tau_pos, tau_neg)(lp, None, adv, mask), batch["logprobs"])
    _, ref_grad = _value_grad(lambda lp: reinforce(lp, adv, mask, "seq-mean-token-mean"), batch["logprobs"])
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=0)  # gate slope 4σ(0)(1-σ(0)) = 1
    scaled = torch.where(adv > 0, 2 / tau_pos * adv, 2 / tau_neg * adv)  # f(1) = 2/τ
    ref_value = reinforce(batch["logprobs"], scaled, mask, "seq-mean-token-mean")
    torch.testing.assert_close(value, ref_value.detach(), atol=1e-12, rtol=0)
    assert not torch.isclose(value, reinforce(batch["logprobs"], adv, mask, "seq-mean-token-mean"))
