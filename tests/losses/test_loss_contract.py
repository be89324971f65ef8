"""The loss contract: shapes, dtypes, empty rows, the ±20 log-ratio clamp, ``beta``, metrics, errors, exports."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import rlforge.losses as losses
from rlforge.errors import ConfigError
from rlforge.losses import (
    AGGREGATION_MODES,
    CISPOLoss,
    DAPOLoss,
    DrGRPOLoss,
    GRPOLoss,
    GSPOLoss,
    PolicyLoss,
    ReinforceLoss,
    SAPOLoss,
    SimpleGRPOLoss,
    aggregate,
    k3,
)

ALL_LOSSES = [GRPOLoss, DrGRPOLoss, DAPOLoss, CISPOLoss, GSPOLoss, SAPOLoss, ReinforceLoss, SimpleGRPOLoss]
IDS = [cls.__name__ for cls in ALL_LOSSES]


def _call(loss_fn, batch, old=True, ref=True, lp=None):
    return loss_fn(
        batch["logprobs"] if lp is None else lp,
        batch["ref_logprobs"] if ref else None,
        batch["advantages"],
        batch["padding_mask"],
        batch["old_logprobs"] if old else None,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cls", ALL_LOSSES, ids=IDS)
def test_log_ratio_clamp_at_100(cls, dtype, make_batch):
    """Log-ratios of ±100 (exp(100) is inf in fp32) give a finite loss and finite gradients, KL included."""
    assert torch.isinf(torch.exp(torch.tensor(100.0)))
    batch = make_batch(seed=1, dtype=dtype)
    sign = torch.where(torch.arange(batch["logprobs"].numel()) % 2 == 0, 1.0, -1.0).reshape(batch["logprobs"].shape)
    batch["old_logprobs"] = batch["logprobs"] + 100 * sign.to(dtype)
    batch["ref_logprobs"] = batch["logprobs"] - 100 * sign.to(dtype)
    lp = batch["logprobs"].clone().requires_grad_(True)
    loss_fn = cls(beta=0.1)
    loss = _call(loss_fn, batch, lp=lp)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in loss_fn.last_metrics.values())
    assert loss_fn.last_metrics["ratio_max"] == pytest.approx(math.exp(20), rel=1e-5)


@pytest.mark.parametrize("cls", ALL_LOSSES, ids=IDS)
def test_empty_batch_and_nan_padding(cls, make_batch):
    batch = make_batch(seed=2)
    loss_fn = cls(beta=0.1)
    # All rows empty: loss 0, gradient 0, no NaN anywhere.
    lp = batch["logprobs"].clone().requires_grad_(True)
    empty = {**batch, "padding_mask": torch.zeros_like(batch["padding_mask"])}
    loss = _call(loss_fn, empty, lp=lp)
    loss.backward()
    assert loss.item() == 0.0 and lp.grad.abs().sum() == 0
    assert all(math.isfinite(v) for v in loss_fn.last_metrics.values())
    # NaN/inf under padding changes nothing.
    clean = _call(loss_fn, batch)
    pad = batch["padding_mask"] == 0
    dirty = {k: v.masked_fill(pad, float("nan")) if k.endswith("logprobs") else v for k, v in batch.items()}
    dirty["old_logprobs"] = dirty["old_logprobs"].masked_fill(pad, float("inf"))
    lp = dirty["logprobs"].clone().requires_grad_(True)
    value = _call(loss_fn, dirty, lp=lp)
    value.backward()
    torch.testing.assert_close(value, clean)
    assert torch.isfinite(lp.grad).all()


@pytest.mark.parametrize("cls", ALL_LOSSES, ids=IDS)
def test_beta_needs_ref_and_is_mutable(cls, make_batch):
    batch = make_batch(seed=3)
    loss_fn = cls(beta=0.0)
    base = _call(loss_fn, batch, ref=False)
    assert "kl" not in loss_fn.last_metrics  # beta 0 and no reference: KL not measured, so not reported
    loss_fn.beta = 0.25  # what a KL controller callback does
    with pytest.raises(ConfigError, match="ref_logprobs"):
        _call(loss_fn, batch, ref=False)
    penalised = _call(loss_fn, batch)
    assert penalised.item() != base.item()
    assert loss_fn.last_metrics["kl"] > 0
    loss_fn.beta = 0.0
    _call(loss_fn, batch)  # reference given with beta 0: KL is still measured
    valid = batch["padding_mask"].bool()
    expected_kl = k3(batch["logprobs"], batch["ref_logprobs"])[valid].mean().item()
    assert loss_fn.last_metrics["kl"] == pytest.approx(expected_kl, abs=1e-12)


def test_grpo_beta_adds_aggregated_kl(make_batch):
    batch = make_batch(seed=4)
    loss_fn = GRPOLoss()
    base = _call(loss_fn, batch)
    loss_fn.beta = 0.3
    kl = aggregate(k3(batch["logprobs"], batch["ref_logprobs"]), batch["padding_mask"], "seq-mean-token-mean")
    torch.testing.assert_close(_call(loss_fn, batch), base + 0.3 * kl)


@pytest.mark.parametrize("cls", ALL_LOSSES, ids=IDS)
def test_metrics_and_dtypes(cls, make_batch):
    batch = make_batch(seed=5, dtype=torch.bfloat16)
    lp = batch["logprobs"].clone().requires_grad_(True)
    loss_fn = cls(beta=0.05)
    loss = _call(loss_fn, batch, lp=lp)
    loss.backward()
    assert loss.dtype == torch.float32 and lp.grad.dtype == torch.bfloat16 and torch.isfinite(loss)
    expected = {"kl", "ratio_mean", "ratio_min", "ratio_max"} | ({"clip_frac"} if cls is not SAPOLoss else set())
    assert expected <= set(loss_fn.last_metrics)
    assert all(isinstance(v, float) for v in loss_fn.last_metrics.values())
    m = loss_fn.last_metrics
    assert m["ratio_min"] <= m["ratio_mean"] <= m["ratio_max"]
    assert 0.0 <= m.get("clip_frac", 0.0) <= 1.0
    assert _call(cls(beta=0.05), make_batch(seed=5, dtype=torch.float64)).dtype == torch.float64


def test_clip_frac_values():
    lp = torch.tensor([[-1.0, 0.0], [-2.0, -0.5]], dtype=torch.float64)
    old = torch.tensor([[-1.5, 0.0], [-2.0 - math.log(0.5), -0.5]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    grpo = GRPOLoss()
    grpo(lp, None, adv, mask, old)  # r = 1.65 (Â>0) and r = 0.5 (Â<0) are clipped, r = 1 is not
    assert grpo.last_metrics["clip_frac"] == pytest.approx(2 / 3)
    assert grpo.last_metrics["clip_frac_high"] == pytest.approx(1 / 3)
    assert grpo.last_metrics["ratio_min"] == pytest.approx(0.5)
    cispo = CISPOLoss(clip_high=1.5)
    cispo(lp, None, adv, mask, old)
    assert cispo.last_metrics["clip_frac"] == pytest.approx(1 / 3)


def test_seed_keyword_call_form(make_batch):
    """torchforge's seed calls ``loss_fn(logprobs=..., ref_logprobs=..., advantages=..., padding_mask=...)``."""
    batch = make_batch(seed=6)
    adv = batch["advantages"][:, None]  # the seed passes [B, 1]
    lp, ref, mask = batch["logprobs"], batch["ref_logprobs"], batch["padding_mask"]
    simple = SimpleGRPOLoss(beta=0.1)(logprobs=lp, ref_logprobs=ref, advantages=adv, padding_mask=mask)
    # torchforge SimpleGRPOLoss, transcribed:
    kl = torch.exp(ref - lp) - (ref - lp) - 1
    per_token_loss = -(torch.exp(lp - lp.detach()) * adv - 0.1 * kl)
    expected = ((per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    torch.testing.assert_close(simple, expected)
    reinforce = ReinforceLoss(clip_ratio=10.0)(logprobs=lp, ref_logprobs=None, advantages=adv, padding_mask=mask)
    torch.testing.assert_close(reinforce, ((-lp * adv * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean())


def test_aggregation_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4 + 0) / 3)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4 + 0) / 3)
    assert aggregate(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / (3 * 3))
    assert aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(10 / 15)
    with pytest.raises(ConfigError, match=", ".join(AGGREGATION_MODES)):
        aggregate(loss, mask, "sum")
    with pytest.raises(ConfigError, match="aggregation"):
        GRPOLoss(aggregation="mean")


@pytest.mark.parametrize(
    "build",
    [
        lambda: GRPOLoss(clip_low=1.5),
        lambda: GRPOLoss(dual_clip=0.9),
        lambda: GRPOLoss(beta=-1.0),
        lambda: DrGRPOLoss(max_response_len=0),
        lambda: CISPOLoss(clip_high=0.0),
        lambda: CISPOLoss(clip_low=2.0),
        lambda: GSPOLoss(clip_high=-1.0),
        lambda: SAPOLoss(tau_pos=0.0),
        lambda: ReinforceLoss(clip_ratio=1.0),
        lambda: ReinforceLoss(clip_ratio=0.0),
    ],
)
def test_invalid_config(build):
    with pytest.raises(ConfigError):
        build()


def test_shape_errors(make_batch):
    batch = make_batch(seed=7)
    with pytest.raises(ValueError, match="advantages"):
        GRPOLoss()(batch["logprobs"], None, batch["advantages"][:3], batch["padding_mask"])
    with pytest.raises(ValueError, match="padding_mask"):
        GRPOLoss()(batch["logprobs"], None, batch["advantages"], batch["padding_mask"][:, :2])


CONSTRUCTORS = {
    GRPOLoss: dict(
        clip_low=0.2,
        clip_high=0.2,
        beta=0.0,
        kl_estimator="k3",
        aggregation="seq-mean-token-mean",
        dual_clip=None,
        kl_times_ratio=False,
    ),
    DrGRPOLoss: dict(clip_low=0.2, clip_high=0.2, beta=0.0, max_response_len=None),
    DAPOLoss: dict(clip_low=0.2, clip_high=0.28, beta=0.0),
    CISPOLoss: dict(clip_high=5.0, clip_low=None, beta=0.0),
    GSPOLoss: dict(clip_low=3e-4, clip_high=4e-4, beta=0.0),
    SAPOLoss: dict(tau_pos=1.0, tau_neg=1.05, beta=0.0),
    ReinforceLoss: dict(clip_ratio=None),
    SimpleGRPOLoss: dict(beta=0.1),
}


@pytest.mark.parametrize("cls", ALL_LOSSES, ids=IDS)
def test_public_api(cls):
    """Constructor names/defaults are API (YAML ``init_args``); docstrings carry ``Args:`` for the CLI help."""
    params = inspect.signature(cls.__init__).parameters
    for name, default in CONSTRUCTORS[cls].items():
        assert params[name].default == default, name
    assert list(params)[1 : 1 + len(CONSTRUCTORS[cls])] == list(CONSTRUCTORS[cls])
    assert issubclass(cls, PolicyLoss) and "Args:" in cls.__doc__
    assert cls.__name__ in losses.__all__
    forward = list(inspect.signature(cls.forward).parameters)
    assert forward == ["self", "logprobs", "ref_logprobs", "advantages", "padding_mask", "old_logprobs"]
    assert isinstance(cls().beta, float)
