"""``rlforge.optim``: the default AdamW (fused where torch has the kernel) and its warm-up schedule."""

from __future__ import annotations

import math

import torch

from rlforge.optim import build_optimizers, fused_adamw_supported

LR, WD, BETAS, EPS = 1e-2, 0.1, (0.9, 0.999), 1e-8


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((7, 5), (5,), (3, 4, 2))]


def _grads(step: int, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) for p in params]


def _reference_adamw(params: list[torch.Tensor], steps: int) -> list[torch.Tensor]:
    """AdamW written out (Loshchilov & Hutter: decoupled decay), constant lr."""
    values = [p.detach().clone().double() for p in params]
    m = [torch.zeros_like(v) for v in values]
    v2 = [torch.zeros_like(v) for v in values]
    for t in range(1, steps + 1):
        for i, grad in enumerate(_grads(t, params)):
            grad = grad.double()
            values[i] *= 1 - LR * WD
            m[i] = BETAS[0] * m[i] + (1 - BETAS[0]) * grad
            v2[i] = BETAS[1] * v2[i] + (1 - BETAS[1]) * grad**2
            m_hat, v_hat = m[i] / (1 - BETAS[0] ** t), v2[i] / (1 - BETAS[1] ** t)
            values[i] -= LR * m_hat / (v_hat.sqrt() + EPS)
    return values


def _run(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: range) -> None:
    for t in steps:
        for p, grad in zip(params, _grads(t, params), strict=True):
            p.grad = grad
        optimizer.step()


def test_default_adamw_is_fused_on_cpu_and_matches_adamw_written_out():
    params = _params()
    opt = build_optimizers(params, LR, WD, warmup_steps=0)["optimizer"]
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["fused"] is True
    expected = _reference_adamw(params, steps=5)
    _run(opt, params, range(1, 6))
    for p, ref in zip(params, expected, strict=True):
        assert torch.allclose(p.double(), ref, atol=1e-6, rtol=0)


def test_a_per_tensor_adamw_checkpoint_resumes_in_the_fused_one():
    """Optimizer state saved before the default turned fused continues as if nothing changed."""
    old_params = _params()
    old = torch.optim.AdamW(old_params, lr=LR, weight_decay=WD)  # torch's default on CPU: the per-tensor loop
    _run(old, old_params, range(1, 4))
    new_params = [torch.nn.Parameter(p.detach().clone()) for p in old_params]
    new = build_optimizers(new_params, LR, WD, warmup_steps=0)["optimizer"]
    new.load_state_dict(old.state_dict())
    _run(new, new_params, range(4, 6))
    expected = _reference_adamw(_params(), steps=5)
    for p, ref in zip(new_params, expected, strict=True):
        assert torch.allclose(p.double(), ref, atol=1e-6, rtol=0)


def test_fused_only_where_torch_has_the_kernel():
    assert fused_adamw_supported(_params())
    assert not fused_adamw_supported([])
    assert not fused_adamw_supported([torch.nn.Parameter(torch.zeros(3, device="meta"))])
    assert not fused_adamw_supported([*_params(), torch.nn.Parameter(torch.zeros(2, dtype=torch.int64), False)])
    meta = build_optimizers([torch.nn.Parameter(torch.zeros(3, device="meta"))], LR, WD, 0)["optimizer"]
    assert not meta.defaults["fused"]


def test_a_replacement_optimizer_is_used_as_given():
    params = _params()
    out = build_optimizers(params, LR, WD, 0, optimizer=lambda ps: torch.optim.SGD(ps, lr=0.5))
    assert isinstance(out["optimizer"], torch.optim.SGD)


def test_warm_up_is_linear_then_constant():
    opt = build_optimizers(_params(), LR, WD, warmup_steps=3)
    lrs = []
    for _ in range(6):
        lrs.append(opt["optimizer"].param_groups[0]["lr"])
        opt["optimizer"].step()
        opt["lr_scheduler"].step()
    assert all(math.isclose(a, b) for a, b in zip(lrs, [LR / 4, LR / 2, 3 * LR / 4, LR, LR, LR], strict=True))
