"""Schulman's KL estimators, checked exactly by enumerating a small categorical distribution.

With ``x ~ π`` (K = 6 outcomes), ``log r = log π_ref(x) - log π(x)`` and expectations computed exactly as
``Σ_x π(x) k(x)``, we test:

* values: ``E[k1] = E[k3] = KL(π ‖ π_ref)`` (unbiased), ``E[k2] ≠ KL`` (biased; it is ½ E[(log r)²]);
* gradients *as a loss*, i.e. ``Σ_x sg(π(x)) ∇_θ k(x)`` (samples held fixed, gradient through ``log π(x)`` only,
  which is what autograd does on a sampled batch):
  ``∇k1 -> 0`` (useless as a penalty), ``∇k2 -> ∇ KL(π ‖ π_ref)`` (the reverse-KL gradient),
  ``∇k3 -> ∇ KL(π_ref ‖ π)`` (the *forward* KL gradient, not the reverse one), and
  ``∇(ρ k3) -> ∇ KL(π ‖ π_ref)`` with ``ρ = exp(log π - sg(log π))`` (``kl_times_ratio`` / TRL's
  ``use_bias_correction_kl``; ``ρ k1`` gives the same);
* the same expected gradients come out of ``GRPOLoss(beta=1)`` (advantages 0) token by token.
"""

from __future__ import annotations

import pytest
import torch

from rlforge.errors import ConfigError
from rlforge.losses import GRPOLoss, k1, k2, k3, kl_estimate


@pytest.fixture
def dist():
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(6, generator=gen, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6, generator=gen, dtype=torch.float64), dim=0)
    return theta, ref


def _expectation(theta, ref, estimator, times_ratio=False):
    logp = torch.log_softmax(theta, dim=0)
    values = estimator(logp, ref)
    if times_ratio:
        values = torch.exp(logp - logp.detach()) * values
    return (logp.exp().detach() * values).sum()  # Σ_x sg(π(x)) k(x): samples held fixed


def _grad(fn, theta):
    (grad,) = torch.autograd.grad(fn(), theta)
    return grad


def _kl_reverse(theta, ref):  # KL(π ‖ π_ref), fully differentiable
    logp = torch.log_softmax(theta, dim=0)
    return (logp.exp() * (logp - ref)).sum()


def _kl_forward(theta, ref):  # KL(π_ref ‖ π)
    logp = torch.log_softmax(theta, dim=0)
    return (ref.exp() * (ref - logp)).sum()


def test_k1_k3_unbiased_k2_biased(dist):
    theta, ref = dist
    kl = _kl_reverse(theta, ref).item()
    assert kl > 0.1
    assert _expectation(theta, ref, k1).item() == pytest.approx(kl, abs=1e-12)
    assert _expectation(theta, ref, k3).item() == pytest.approx(kl, abs=1e-12)
    bias = _expectation(theta, ref, k2).item() - kl
    assert abs(bias) > 1e-3


def test_signs(dist):
    theta, ref = dist
    logp = torch.log_softmax(theta, dim=0).detach()
    assert (k2(logp, ref) >= 0).all() and (k3(logp, ref) >= 0).all()
    assert (k1(logp, ref) < 0).any()  # k1 is unbiased but individual samples go negative


def test_gradients(dist):
    theta, ref = dist
    reverse = _grad(lambda: _kl_reverse(theta, ref), theta)
    forward = _grad(lambda: _kl_forward(theta, ref), theta)
    assert not torch.allclose(reverse, forward)
    torch.testing.assert_close(_grad(lambda: _expectation(theta, ref, k1), theta), torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(_grad(lambda: _expectation(theta, ref, k2), theta), reverse)
    torch.testing.assert_close(_grad(lambda: _expectation(theta, ref, k3), theta), forward)
    torch.testing.assert_close(_grad(lambda: _expectation(theta, ref, k3, times_ratio=True), theta), reverse)
    torch.testing.assert_close(_grad(lambda: _expectation(theta, ref, k1, times_ratio=True), theta), reverse)


@pytest.mark.parametrize(
    ("estimator", "times_ratio", "target"),
    [("k1", False, "zero"), ("k2", False, "reverse"), ("k3", False, "forward"), ("k3", True, "reverse")],
)
def test_grpo_loss_kl_gradient(dist, estimator, times_ratio, target):
    """One row per outcome x; the loss's per-token gradients g_x, weighted by π(x), give E_π[∇ penalty]."""
    theta, ref = dist
    logp = torch.log_softmax(theta, dim=0)
    rows = logp.detach().clone().unsqueeze(-1).requires_grad_(True)  # [K, 1]
    loss_fn = GRPOLoss(beta=1.0, kl_estimator=estimator, kl_times_ratio=times_ratio)
    loss = loss_fn(rows, ref.unsqueeze(-1), torch.zeros(6, dtype=torch.float64), torch.ones(6, 1))
    (per_row,) = torch.autograd.grad(loss, rows)
    per_row = per_row.squeeze(-1) * 6  # undo the mean over the K rows
    (expected_grad,) = torch.autograd.grad(logp, theta, grad_outputs=logp.exp().detach() * per_row)
    targets = {
        "zero": torch.zeros(6, dtype=torch.float64),
        "reverse": _grad(lambda: _kl_reverse(theta, ref), theta),
        "forward": _grad(lambda: _kl_forward(theta, ref), theta),
    }
    torch.testing.assert_close(expected_grad, targets[target])
    assert loss_fn.last_metrics["kl"] == pytest.approx(
        kl_estimate(estimator, logp.detach(), ref).mean().item(), abs=1e-12
    )


def test_kl_estimate_dispatch_and_errors():
    lp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -0.5])
    for name, fn in (("k1", k1), ("k2", k2), ("k3", k3)):
        torch.testing.assert_close(kl_estimate(name, lp, ref), fn(lp, ref))
    with pytest.raises(ConfigError, match="k1, k2, k3"):
        kl_estimate("k4", lp, ref)
    with pytest.raises(ConfigError, match="kl_estimator"):
        GRPOLoss(kl_estimator="k9")


def test_k3_clamped_finite():
    lp = torch.tensor([0.0, -200.0], requires_grad=True)
    ref = torch.tensor([-200.0, 0.0])
    value = k3(lp, ref)
    value.sum().backward()
    assert torch.isfinite(value).all() and torch.isfinite(lp.grad).all()
