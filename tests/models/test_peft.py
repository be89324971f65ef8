"""LoRA through PEFT: only adapters train, merged weights for the generator, base-as-reference, clear errors."""

from __future__ import annotations

import copy

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from rlforge import GRPOModule, LocalStrategy, RLDataModule, RLTrainer, SFTModule  # noqa: E402
from rlforge.errors import ConfigError, MissingDependencyError  # noqa: E402
from rlforge.models import compute_logprobs, load_policy  # noqa: E402
from rlforge.models.peft import (  # noqa: E402
    apply_peft,
    base_model,
    generator_weights,
    is_peft_model,
    merged_state_dict,
    trainable_parameters,
)

LORA = dict(r=8, lora_alpha=16, target_modules="all-linear")


def _lora_policy(seed: int = 0):
    """The default policy with LoRA r=8 on all linear layers and non-zero (random) B matrices."""
    policy, tokenizer = load_policy("rlforge/default-policy")
    policy = apply_peft(policy, peft.LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:  # B starts at zero (merged == base); make the adapters do something
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    return policy, tokenizer


def test_only_adapter_parameters_train_and_sit_in_the_optimizer(tmp_path):
    module = GRPOModule(peft=peft.LoraConfig(**LORA))
    trainer = RLTrainer(max_steps=1, default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False)
    trainer.prepare(module, RLDataModule(batch_size=2))
    trainable, total = trainable_parameters(module.policy)
    # Independent count: r * (fan_in + fan_out) for every linear of the 4 layers (q, k, v, o, gate, up, down).
    hidden, inter, kv = 128, 384, 2 * 32
    per_layer = 8 * ((hidden + hidden) * 2 + (hidden + kv) * 2 + (hidden + inter) * 3)
    assert trainable == 4 * per_layer == 77824
    assert trainable / total < 0.10
    optimized = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    assert sum(p.numel() for p in optimized) == trainable and all(p.requires_grad for p in optimized)
    names = {id(p): n for n, p in module.policy.named_parameters()}
    assert all("lora_" in names[id(p)] for p in optimized)


def test_merged_weights_equal_merge_and_unload_and_leave_the_policy_untouched():
    policy, _ = _lora_policy()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    merged = merged_state_dict(policy)
    reference = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert merged.keys() == reference.keys()
    assert all(torch.equal(merged[k], reference[k]) for k in reference)
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    base, _ = load_policy("rlforge/default-policy")
    assert merged.keys() == base.state_dict().keys()  # plain HF names: what any generator loads
    assert not torch.equal(
        merged["model.layers.0.self_attn.q_proj.weight"], base.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    )
    assert generator_weights(base).keys() == base.state_dict().keys()


def test_generator_samples_the_merged_adapter_model():
    from rlforge.generation.factory import build_generator

    policy, tokenizer = _lora_policy()
    generator = build_generator("torch", policy, tokenizer)
    assert not is_peft_model(generator.model)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        got = generator.model(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    generator.update_weights(generator_weights(policy), 1)  # strict HF-named load works


def test_reference_is_the_base_model_with_adapters_disabled_not_a_copy(tmp_path):
    base, _ = load_policy("rlforge/default-policy")
    from rlforge.losses import GRPOLoss
    from rlforge.services import LocalReference

    module = GRPOModule(peft=peft.LoraConfig(**LORA), loss=GRPOLoss(beta=0.1), group_size=2)
    strategy = LocalStrategy(device="cpu")
    trainer = RLTrainer(max_steps=1, strategy=strategy, default_root_dir=str(tmp_path), logger=False)
    trainer.prepare(module, RLDataModule(batch_size=2))
    reference = trainer.services.reference
    assert isinstance(reference, LocalReference) and reference.model is module.policy  # no second copy
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.fill_(0.05)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9]])
    batch = type("B", (), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "prompt_len": 3})()
    ref = reference.logprobs(batch, module.sampling.temperature)
    want, _ = compute_logprobs(base, ids, torch.ones_like(ids), 3, module.sampling.temperature)
    policy_lp, _ = compute_logprobs(module.policy, ids, torch.ones_like(ids), 3, module.sampling.temperature)
    assert torch.allclose(ref, want, atol=1e-6)
    assert not torch.allclose(policy_lp, want, atol=1e-3)  # the adapters are back on after the block
    with base_model(module.policy) as reference:
        assert reference is module.policy


def test_titan_backend_says_it_does_not_support_peft():
    with pytest.raises(ConfigError, match=r"module.peft is not supported by module.backend='titan'"):
        GRPOModule(backend="titan", peft=peft.LoraConfig(**LORA))


def test_peft_must_be_a_peft_config():
    with pytest.raises(ConfigError, match=r"module.peft must be a PEFT config given by class_path"):
        SFTModule(peft={"r": 8})


def test_missing_peft_extra_is_one_line_with_the_pip_command(monkeypatch):
    from rlforge import imports

    class _Missing:
        def __bool__(self) -> bool:
            return False

        def __str__(self) -> str:
            return "Requirement 'peft>=0.21' not met"

    monkeypatch.setitem(imports._EXTRAS, "peft", (_Missing(), "pip install 'rlforge[peft]'", "LoRA adapters"))
    with pytest.raises(
        MissingDependencyError, match=r"module.peft needs the `peft` extra: `pip install 'rlforge\[peft\]'`"
    ):
        GRPOModule(peft=peft.LoraConfig(**LORA))


def test_lora_sft_checkpoint_is_a_fit_model_loaded_merged(tiny_policy_dir, tmp_path):
    from peft import PeftModel

    from rlforge.cli import run
    from tests.helpers import fast_flags, metric_rows

    lora = "{class_path: peft.LoraConfig, init_args: {r: 4, lora_alpha: 8, target_modules: all-linear}}"
    run(
        ["sft", "--trainer.max_steps", "3", "--trainer.default_root_dir", str(tmp_path / "sft"),
         "--trainer.enable_progress_bar", "false", "--trainer.val_check_interval", "0", "--data.batch_size", "4",
         "--module.model", tiny_policy_dir, "--module.lr", "0.01", "--module.init_args.peft", lora]
    )  # fmt: skip
    folder = tmp_path / "sft" / "rlforge" / "version_0" / "checkpoints" / "step-000003" / "policy"
    assert (folder / "adapter_config.json").is_file()
    loaded, _ = load_policy(str(folder))  # the base with the adapters merged: a plain HF model
    base, _ = load_policy(tiny_policy_dir)
    want = PeftModel.from_pretrained(base, str(folder)).merge_and_unload().state_dict()
    assert not is_peft_model(loaded) and all(torch.equal(loaded.state_dict()[k], v) for k, v in want.items())
    run(["fit", *fast_flags(str(folder), tmp_path / "rl")])
    assert len(metric_rows(tmp_path / "rl")) == 2
