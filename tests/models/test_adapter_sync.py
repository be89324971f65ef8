"""Adapter-only weight sync: same generator weights as the merged sync, a fraction of the bytes."""

from __future__ import annotations

import copy

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from rlforge import GRPOModule, LocalStrategy, RLDataModule, RLTrainer  # noqa: E402
from rlforge.errors import ConfigError  # noqa: E402
from rlforge.models import load_policy  # noqa: E402
from rlforge.models.adapter_sync import AdapterMerger, adapter_payload, check_sync_mode, payload_bytes  # noqa: E402
from rlforge.models.peft import apply_peft, merged_state_dict  # noqa: E402
from tests.strategies.conftest import column  # noqa: E402

FULL_BYTES = 856448 * 4  # the default policy's fp32 weights


def _policy(**lora):
    policy, _ = load_policy("rlforge/default-policy")
    return apply_peft(policy, peft.LoraConfig(**lora))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_generator_side_merge_is_bitwise_the_merged_sync(dtype):
    policy, _ = load_policy("rlforge/default-policy", dtype)
    policy = apply_peft(policy, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    merger = AdapterMerger(policy)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    merged, full = merger.merge(adapter_payload(policy)), merged_state_dict(policy)
    assert len(merged) == 4 * 7 and set(merged) <= set(full)
    assert all(torch.equal(merged[k], full[k]) for k in merged)
    reference = copy.deepcopy(policy).merge_and_unload().state_dict()  # PEFT's own merge, in place
    assert all(torch.equal(full[k], reference[k]) and full[k].dtype == reference[k].dtype for k in reference)


@pytest.mark.parametrize(
    ("lora", "fraction"),
    [
        # r * (fan_in + fan_out) * 4 bytes per adapted linear, over 3,425,792 bytes of fp32 weights.
        (dict(r=8, lora_alpha=16, target_modules="all-linear"), 77824 * 4 / FULL_BYTES),  # 9.1%
        (dict(r=4, lora_alpha=8, target_modules="all-linear"), 38912 * 4 / FULL_BYTES),  # 4.5%
        (dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]), 14336 * 4 / FULL_BYTES),  # 1.7%
    ],
)
def test_adapter_payload_bytes(lora, fraction):
    policy = _policy(**lora)
    assert payload_bytes(merged_state_dict(policy)) == FULL_BYTES
    assert payload_bytes(adapter_payload(policy)) / FULL_BYTES == pytest.approx(fraction)


def _fit(root, peft_sync):
    module = GRPOModule(group_size=3, lr=0.01, peft=peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    trainer = RLTrainer(
        max_steps=3,
        strategy=LocalStrategy(device="cpu", peft_sync=peft_sync),
        default_root_dir=str(root),
        enable_progress_bar=False,
        enable_checkpointing=False,
        val_check_interval=0,
        val_at_start=False,
    )
    trainer.fit(module, RLDataModule(batch_size=2))


def test_adapter_sync_gives_the_same_run_as_merged_sync_with_under_5pct_of_the_bytes(tmp_path):
    _fit(tmp_path / "merged", "merged")
    _fit(tmp_path / "adapter", "adapter")
    for name in ("train/loss", "rollout/reward_mean", "rollout/response_len"):
        assert column(tmp_path / "adapter", name) == column(tmp_path / "merged", name), name
    merged, adapter = column(tmp_path / "merged", "perf/sync_bytes"), column(tmp_path / "adapter", "perf/sync_bytes")
    assert set(merged) == set(adapter) == {1, 2, 3}
    assert merged[1] == FULL_BYTES and adapter[1] == 38912 * 4 and adapter[1] / merged[1] < 0.05


def test_sync_mode_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"trainer.strategy.peft_sync must be one of"):
        check_sync_mode("lora")
    with pytest.raises(ConfigError, match=r"trainer.strategy.peft_sync='adapter' needs the torch generator"):
        check_sync_mode("adapter", "vllm")
    base, _ = load_policy("rlforge/default-policy")
    with pytest.raises(ConfigError, match=r"needs a PEFT policy \(set module.peft\)"):
        AdapterMerger(base)
