"""Independent checks of each loss against its paper's formula.

Two kinds: (1) tiny cases computed by hand (numbers in the comments), (2) scalar Python-loop transcriptions of
the papers' objectives *and of their analytic gradients* (d r/d log π = r, dk3/d log π = 1 - π_ref/π), compared
with the tensor implementations on random off-policy batches. Loss = -objective throughout.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlforge.losses import (
    CISPOLoss,
    DAPOLoss,
    DrGRPOLoss,
    GRPOLoss,
    GSPOLoss,
    ReinforceLoss,
    SAPOLoss,
)

# Two sequences: o_1 = one token with r = e^0.5 ≈ 1.6487, Â = +1; o_2 = two tokens with r = (0.5, 1), Â = -1.
LP = torch.tensor([[-1.0, 0.0], [-2.0, -0.5]], dtype=torch.float64)
OLD = torch.tensor([[-1.5, 0.0], [-2.0 - math.log(0.5), -0.5]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def _run(loss_fn, lp=LP, old=OLD, ref=None, adv=ADV, mask=MASK):
    leaf = lp.clone().requires_grad_(True)
    value = loss_fn(leaf, ref, adv, mask, old_logprobs=old)
    (grad,) = torch.autograd.grad(value, leaf)
    return value.item(), grad


def test_grpo_by_hand():
    # o_1: min(1.6487, clip=1.2)·1 = 1.2; o_2: min(-0.5, -0.8) = -0.8 and min(-1, -1) = -1, mean -0.9.
    # J = (1.2 - 0.9)/2 = 0.15; gradient: o_1 clipped -> 0; o_2 token 1 clipped (r < 0.8, Â < 0) -> 0;
    # o_2 token 2: -(1/2)(1/2)·Â·r = +0.25.
    value, grad = _run(GRPOLoss(0.2, 0.2))
    assert value == pytest.approx(-0.15, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [0.0, 0.25]], dtype=torch.float64))


def test_dapo_by_hand():
    # Token mean over 3 tokens with ε_high = 0.28: J = (1.28 - 0.8 - 1)/3 = -0.52/3.
    value, grad = _run(DAPOLoss(0.2, 0.28))
    assert value == pytest.approx(0.52 / 3, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [0.0, 1 / 3]], dtype=torch.float64))


def test_dr_grpo_by_hand():
    # Token sums divided by G·L_max: L_max = T = 2 -> J = (1.2 + (-0.8 - 1))/4 = -0.15; L_max = 10 -> -0.6/20.
    value, grad = _run(DrGRPOLoss())
    assert value == pytest.approx(0.15, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [0.0, 0.25]], dtype=torch.float64))
    value, _ = _run(DrGRPOLoss(max_response_len=10))
    assert value == pytest.approx(0.6 / 20, abs=1e-12)


def test_gspo_by_hand():
    # s_1 = e^0.5 -> clipped to 1.2 (Â > 0); s_2 = exp((ln 0.5 + 0)/2) = √0.5 ≈ 0.707 -> min(-0.707, -0.8) = -0.8.
    # J = (1.2 - 0.8)/2 = 0.2; both sequences are clipped, so the gradient is 0.
    value, grad = _run(GSPOLoss(0.2, 0.2))
    assert value == pytest.approx(-0.2, abs=1e-12)
    assert grad.abs().sum() == 0
    # With ε = 0.7 nothing is clipped: J = (e^0.5 - √0.5)/2, ∂/∂log π_2t = -(1/G)·Â·s_2/|o_2| = √0.5/4.
    value, grad = _run(GSPOLoss(0.7, 0.7))
    assert value == pytest.approx(-(math.exp(0.5) - math.sqrt(0.5)) / 2, abs=1e-12)
    s1, s2 = math.exp(0.5), math.sqrt(0.5)
    expected = torch.tensor([[-s1 / 2, 0.0], [s2 / 4, s2 / 4]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected)


def test_cispo_by_hand():
    # w = sg(min(r, 1.5)) = (1.5; 0.5, 1). J = (1.5·1·(-1) + 0.5·(-1)·(-2) + 1·(-1)·(-0.5))/3 = 0.
    # ∂L/∂log π = -w·Â/3 = (-0.5; 1/6, 1/3): every token keeps a gradient, even the capped one.
    value, grad = _run(CISPOLoss(clip_high=1.5))
    assert value == pytest.approx(0.0, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-0.5, 0.0], [1 / 6, 1 / 3]], dtype=torch.float64))
    # MiniMax's floor 1 - ε_low with ε_low = 0.2 raises w = 0.5 to 0.8: J = (-1.5 + 1.6 + 0.5)/3 = 0.2.
    value, _ = _run(CISPOLoss(clip_high=1.5, clip_low=0.2))
    assert value == pytest.approx(-0.2, abs=1e-12)


def test_sapo_by_hand():
    # f(r) = σ(τ(r-1))·4/τ with τ = 1 for Â > 0 and τ = 2 for Â <= 0 here.
    def sig(z):
        return 1 / (1 + math.exp(-z))

    r1 = math.exp(0.5)
    objective = (sig(r1 - 1) * 4 + (-(sig(2 * (0.5 - 1)) * 2) - sig(0.0) * 2) / 2) / 2
    value, grad = _run(SAPOLoss(tau_pos=1.0, tau_neg=2.0))
    assert value == pytest.approx(-objective, abs=1e-12)
    # ∂f(r)/∂log π = 4σ(1-σ)·r: at r = 1 it is 1 whatever τ.
    g1 = -4 * sig(r1 - 1) * (1 - sig(r1 - 1)) * r1 / 2
    g21 = 4 * sig(-1.0) * (1 - sig(-1.0)) * 0.5 / 4
    torch.testing.assert_close(grad, torch.tensor([[g1, 0.0], [g21, 0.25]], dtype=torch.float64))


def test_grpo_kl_by_hand():
    # One token, on-policy, Â = 0: loss = β·k3 = β(π_ref/π - log(π_ref/π) - 1) with log(π_ref/π) = 1.
    lp = torch.tensor([[-2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.0]], dtype=torch.float64)
    value, grad = _run(GRPOLoss(beta=0.5), lp=lp, old=None, ref=ref, adv=torch.zeros(1), mask=torch.ones(1, 1))
    assert value == pytest.approx(0.5 * (math.e - 1 - 1), abs=1e-12)
    assert grad.item() == pytest.approx(0.5 * (1 - math.e), abs=1e-12)


# ---- scalar transcriptions of the objectives and their gradients, on random batches -----------------------


def _rows(batch, per_token=True):
    """Per sequence: a list of (log π, log π_old, log π_ref, Â) for its valid tokens."""
    rows = []
    adv = batch["advantages"]
    for i in range(batch["logprobs"].shape[0]):
        tokens = []
        for t in range(batch["logprobs"].shape[1]):
            if batch["padding_mask"][i, t] > 0:
                a = adv[i, t] if adv.dim() == 2 else adv[i]
                tokens.append(
                    (
                        batch["logprobs"][i, t].item(),
                        batch["old_logprobs"][i, t].item(),
                        batch["ref_logprobs"][i, t].item(),
                        a.item(),
                    )
                )
        rows.append(tokens)
    return rows


def _k3(lp, ref):
    return math.exp(ref - lp) - (ref - lp) - 1, 1 - math.exp(ref - lp)  # value, d/d log π


def reference(kind, rows, width, beta, **kw):
    """``(loss, grad[i][t])`` of -J for the paper objective ``kind``, by explicit loops."""
    G = len(rows)
    total_tokens = sum(len(r) for r in rows)
    loss, grad = 0.0, [[0.0] * width for _ in rows]
    for i, tokens in enumerate(rows):
        n = len(tokens)
        if kind in ("grpo", "sapo", "reinforce", "gspo"):
            norm = 1 / (G * n) if n else 0.0
        elif kind == "drgrpo":
            norm = 1 / (G * kw["max_len"])
        else:  # dapo, cispo: token-level mean over the batch
            norm = 1 / total_tokens
        if kind == "gspo" and n:
            s = math.exp(sum(lp - old for lp, old, _, _ in tokens) / n)
        for t, (lp, old, ref, a) in enumerate(tokens):
            r = math.exp(lp - old)
            if kind in ("grpo", "drgrpo", "dapo"):
                lo, hi = 1 - kw["eps_low"], 1 + kw["eps_high"]
                term = min(r * a, min(max(r, lo), hi) * a)
                active = (a > 0 and r <= hi) or (a < 0 and r >= lo) or a == 0
                dterm = a * r if active else 0.0
            elif kind == "gspo":
                lo, hi = 1 - kw["eps_low"], 1 + kw["eps_high"]
                term = min(s * a, min(max(s, lo), hi) * a)
                active = (a > 0 and s <= hi) or (a < 0 and s >= lo)
                # ∂s/∂log π_t = s/n: every token of the sequence moves s
                for u in range(n):
                    grad[i][u] -= norm * (a * s / n if active else 0.0)
                dterm = 0.0
            elif kind == "cispo":
                w = min(r, kw["cap"])
                term, dterm = w * a * lp, w * a
            elif kind == "reinforce":
                c = kw["clip_ratio"]
                lo, hi = (1 - c, 1 + c) if c < 1 else (1 / c, c)  # PPO-style ε below 1, a [1/c, c] cap above
                w = min(max(r, lo), hi)
                term, dterm = w * a * lp, w * a
            elif kind == "sapo":
                tau = kw["tau_pos"] if a > 0 else kw["tau_neg"]
                sig = 1 / (1 + math.exp(-tau * (r - 1)))
                term, dterm = sig * 4 / tau * a, 4 * sig * (1 - sig) * r * a
            kl, dkl = _k3(lp, ref)
            loss += norm * (-term + beta * kl)
            grad[i][t] += norm * (-dterm + beta * dkl)
    return loss, torch.tensor(grad, dtype=torch.float64)


FORMULA_CASES = [
    ("grpo", lambda b: GRPOLoss(0.2, 0.28, beta=b), dict(eps_low=0.2, eps_high=0.28)),
    (
        "drgrpo",
        lambda b: DrGRPOLoss(0.1, 0.3, beta=b, max_response_len=9),
        dict(eps_low=0.1, eps_high=0.3, max_len=9),
    ),
    ("dapo", lambda b: DAPOLoss(beta=b), dict(eps_low=0.2, eps_high=0.28)),
    ("cispo", lambda b: CISPOLoss(clip_high=1.3, beta=b), dict(cap=1.3)),
    ("gspo", lambda b: GSPOLoss(0.3, 0.4, beta=b), dict(eps_low=0.3, eps_high=0.4)),
    ("sapo", lambda b: SAPOLoss(0.7, 1.3, beta=b), dict(tau_pos=0.7, tau_neg=1.3)),
    ("reinforce", lambda b: ReinforceLoss(clip_ratio=2.0, beta=b), dict(clip_ratio=2.0)),
    ("reinforce", lambda b: ReinforceLoss(clip_ratio=0.2, beta=b), dict(clip_ratio=0.2)),
]


@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize(
    ("kind", "factory", "kw"), FORMULA_CASES, ids=[f"{c[0]}-{'-'.join(map(str, c[2].values()))}" for c in FORMULA_CASES]
)
def test_matches_paper_transcription(kind, factory, kw, beta, make_batch):
    batch = make_batch(seed=11, per_token_adv=kind != "gspo", spread=0.4)
    expected_loss, expected_grad = reference(kind, _rows(batch), batch["logprobs"].shape[1], beta, **kw)
    value, grad = _run(
        factory(beta),
        lp=batch["logprobs"],
        old=batch["old_logprobs"],
        ref=batch["ref_logprobs"],
        adv=batch["advantages"],
        mask=batch["padding_mask"],
    )
    assert value == pytest.approx(expected_loss, abs=1e-12)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)
