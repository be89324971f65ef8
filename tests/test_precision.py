"""``precision: bf16-mixed``: the policy's forwards under bf16 autocast, fp32 parameters, gradients and logprobs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlforge.cli import main
from rlforge.errors import ConfigError
from rlforge.generation.layers import _linear_add, attention
from rlforge.grpo import GRPOModule
from rlforge.precision import autocast, check_precision
from rlforge.sft import SFTModule
from tests.helpers import fast_flags, metric_rows
from tests.models.test_packed import _batch, _run
from tests.reliability.test_config_cli import _cli, _one_line_error

BF16 = "bf16-mixed"


def test_unknown_precisions_are_config_errors():
    assert check_precision("32-true") == "32-true" and check_precision(BF16) == BF16
    for bad in ("16-mixed", "bf16", "fp32", 32):
        with pytest.raises(ConfigError, match="module.precision must be one of 32-true, bf16-mixed"):
            check_precision(bad)
    with pytest.raises(ConfigError, match="module.precision"):
        GRPOModule(precision="16-mixed")


def test_unknown_precision_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    line = _one_line_error(_cli("fit", "--module.precision", "16-mixed", "--trainer.default_root_dir", str(tmp_path)))
    assert "module.precision" in line and "16-mixed" in line


def test_autocast_context():
    with autocast("32-true", torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(BF16, torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_cpu_attention_stays_fp32_under_bf16_autocast():
    """SDPA on CPU runs on the fp32 inputs even inside a bf16 autocast (see ``attention``'s docstring)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8)
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attention(q, k, v, mask, 0.3)
    assert got.dtype == torch.float32 and torch.allclose(got, expected, atol=1e-6)
    # bf16 weights (dtype: bfloat16, no autocast): computed in fp32, returned in the inputs' dtype.
    got = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.3)
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), expected, atol=3e-2)


def test_residual_stream_stays_fp32_under_bf16_autocast():
    proj = torch.nn.Linear(8, 8, bias=False)
    residual, x = torch.full((3, 8), 1.0 + 2**-12), torch.randn(3, 8)  # 1 + 2^-12 does not exist in bf16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _linear_add(residual, x, proj)
    expected = residual + (x.bfloat16() @ proj.weight.t().bfloat16()).float()
    assert out.dtype == torch.float32 and torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("packed", [True, False])
def test_bf16_mixed_logprobs_and_gradients_against_the_fp32_hf_forward(tiny_policy, packed):
    """Within bf16 rounding of the fp32 HF forward, yet not equal to it (the autocast ran); fp32 gradients."""
    model, tokenizer = tiny_policy
    model.train()
    batch = _batch(tokenizer, [[5, 1, 8], [0, 3, 7], [2, 8, 4]])
    mask = batch.attention_mask[:, batch.prompt_len :].bool()
    ref_lp, ref_ent, ref_grads = _run(model, batch, 1.0, share_prompts=False)  # one plain fp32 HF forward
    lp, ent, grads = _run(model, batch, 1.0, packed=packed, precision=BF16)
    assert lp.dtype == ent.dtype == torch.float32
    error = (lp - ref_lp).abs()[mask].max()
    assert 1e-4 < error < 5e-2, error
    assert (ent - ref_ent).abs()[mask].max() < 5e-2
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        ref = ref_grads[name]
        assert grad.dtype == torch.float32, name
        assert F.cosine_similarity(grad.flatten(), ref.flatten(), dim=0) > 0.99, name


@pytest.fixture()
def forward_modes(monkeypatch):
    """``(grad enabled, bf16 autocast on)`` at each packed logprob forward of a run."""
    import rlforge.models.logprobs as logprobs_mod

    modes: list[tuple[bool, bool]] = []
    original = logprobs_mod.packed_response_logits

    def spy(*args, **kwargs):
        modes.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return original(*args, **kwargs)

    monkeypatch.setattr(logprobs_mod, "packed_response_logits", spy)
    return modes


def test_precision_reaches_the_training_reference_and_proximal_forwards(tiny_policy_dir, tmp_path, forward_modes):
    flags = fast_flags(tiny_policy_dir, tmp_path / "kl", trainer__max_steps=1, module__precision=BF16)
    main(["fit", *flags, "--module.loss.init_args.beta", "0.1"])
    rows = metric_rows(tmp_path / "kl")
    assert rows and all(torch.isfinite(torch.tensor(float(r["train/loss"]))) for r in rows)
    assert forward_modes == [(False, True), (True, True)]  # reference, then training
    forward_modes.clear()
    flags = fast_flags(tiny_policy_dir, tmp_path / "async", trainer__max_steps=2, module__precision=BF16)
    main(["fit", *flags, "--trainer.strategy.init_args.max_staleness", "1"])
    assert forward_modes == [(False, True), (True, True)] * 2  # proximal, then training
    forward_modes.clear()
    main(["fit", *fast_flags(tiny_policy_dir, tmp_path / "fp32", trainer__max_steps=1)])
    assert forward_modes == [(True, False)]


def test_bf16_mixed_trains_and_saves_fp32_parameters(tiny_policy_dir, tmp_path):
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=2, module__precision=BF16)
    main(["fit", *flags])
    from safetensors.torch import load_file

    (weights,) = tmp_path.glob("rlforge/version_0/checkpoints/step-000002/policy/*.safetensors")
    assert {t.dtype for t in load_file(weights).values()} == {torch.float32}


def test_sft_loss_under_bf16_mixed(tiny_policy_dir):
    rows = [{"prompt": f"{a} + 2 =", "completion": f" {a + 2}"} for a in range(6)]
    losses, linear_dtypes = {}, {}
    for precision in ("32-true", BF16):
        module = SFTModule(model=tiny_policy_dir, precision=precision)
        module.configure_model()
        seen: set[torch.dtype] = set()
        for layer in module.policy.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(lambda _m, _i, out, seen=seen: seen.add(out.dtype))
        loss = module.training_step(module.collate(rows))
        loss.backward()
        assert all(p.grad.dtype == torch.float32 for p in module.policy.parameters() if p.grad is not None)
        losses[precision], linear_dtypes[precision] = float(loss.detach()), seen
    # The projections ran in bf16 only under bf16-mixed. How far the loss moves depends on the CPU's bf16 GEMMs (over
    # 1e-5 on an AMX Xeon, 2.9e-6 on an AVX2 EPYC, for this near-uniform random policy): it moves, and only a little.
    assert linear_dtypes == {"32-true": {torch.float32}, BF16: {torch.bfloat16}}
    assert 0 < abs(losses[BF16] - losses["32-true"]) < 1e-2 * losses["32-true"], losses
