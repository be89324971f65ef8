"""`rlforge fit --module.init_args.peft ...` on the default policy, its checkpoints, `rlforge export [--merge]`."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

peft = pytest.importorskip("peft", reason="LoRA tests need the `peft` extra (in `dev`)")

from tests.helpers import fast_flags  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LORA = "{class_path: peft.LoraConfig, init_args: {r: 8, lora_alpha: 16, target_modules: all-linear}}"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lora_run")
    # The default task's math reward (the default policy solves ~1/3 of it, so groups disagree and it learns).
    flags = fast_flags(
        "rlforge/default-policy", root, trainer__max_steps=3, module__lr=0.01, module__reward_fns="null",
        module__group_size=4, data__batch_size=4,
    )  # fmt: skip
    _cli(
        "fit",
        *flags,
        "--module.init_args.peft",
        LORA,
        "--trainer.callbacks",
        "[{class_path: rlforge.ModelCheckpoint, init_args: {every_n_steps: 1}}]",
    )
    return root


def test_fit_logs_trainable_fraction_once_and_sync_bytes(lora_run):
    (metrics,) = lora_run.glob("rlforge/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    pct = [float(r["model/trainable_pct"]) for r in rows if r.get("model/trainable_pct")]
    assert len(pct) == 1 and pct[0] == pytest.approx(100 * 77824 / (856448 + 77824)) and pct[0] < 10
    sync = {int(r["step"]): float(r["perf/sync_bytes"]) for r in rows if r.get("perf/sync_bytes")}
    assert sync == {1: 856448 * 4, 2: 856448 * 4, 3: 856448 * 4}  # merged fp32 weights, HF names


def test_every_checkpoint_holds_an_adapter_folder_that_peft_loads(lora_run):
    from peft import PeftModel
    from safetensors.torch import load_file

    from rlforge.models import load_policy

    checkpoints = sorted((lora_run / "rlforge" / "version_0" / "checkpoints").glob("step-*"))
    assert [p.name for p in checkpoints] == ["step-000001", "step-000002", "step-000003"]
    for ckpt in checkpoints:
        folder = ckpt / "policy"
        assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
        assert not (folder / "model.safetensors").exists()  # no copy of the frozen base weights
        base, _ = load_policy("rlforge/default-policy")
        model = PeftModel.from_pretrained(base, str(folder))
        saved = load_file(str(folder / "adapter_model.safetensors"))
        loaded = {n.replace(".default", ""): p for n, p in model.named_parameters() if "lora_" in n}
        assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
    assert any(float(t.abs().max()) > 0 for k, t in saved.items() if "lora_B" in k)  # it trained


@pytest.mark.slow
def test_export_merge_matches_the_adapter_model_and_plain_export_is_the_adapter(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlforge.models import load_policy

    _cli("export", str(lora_run), str(tmp_path / "merged"), "--merge", "true")
    _cli("export", str(lora_run), str(tmp_path / "adapter"))
    assert (tmp_path / "merged" / "config.json").is_file() and not (
        tmp_path / "merged" / "adapter_config.json"
    ).exists()
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    base, _ = load_policy("rlforge/default-policy")
    adapter = PeftModel.from_pretrained(base, str(tmp_path / "adapter"))
    ids = torch.randint(3, 200, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = adapter(input_ids=ids).logits, merged(input_ids=ids).logits
        with adapter.disable_adapter():
            base_logits = adapter(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert not torch.allclose(base_logits, want, atol=1e-4)  # the adapters changed the model


def _print_config(capsys, *args: str) -> str:
    from rlforge.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", *args, "--print_config"])
    assert exit_.value.code in (0, None)
    return capsys.readouterr().out


def test_print_config_round_trips_the_lora_config(tmp_path, capsys):
    printed = _print_config(capsys, "--module.init_args.peft", LORA)
    lora = yaml.safe_load(printed)["module"]["init_args"]["peft"]
    assert lora["class_path"] == "peft.LoraConfig"
    assert lora["init_args"]["r"] == 8 and lora["init_args"]["target_modules"] == "all-linear"
    (tmp_path / "lora.yaml").write_text(printed)
    assert yaml.safe_load(_print_config(capsys, "--config", str(tmp_path / "lora.yaml"))) == yaml.safe_load(printed)


def test_lora_gpu_config_parses(capsys):
    """The shipped LoRA GPU config parses (it is not run here)."""
    printed = _print_config(capsys, "--config", str(REPO / "configs" / "grpo_gsm8k_qwen3_1_7b_lora.yaml"))
    config = yaml.safe_load(printed)
    module = config["module"]["init_args"]
    assert module["model"] == "Qwen/Qwen3-1.7B" and module["backend"] == "hf"
    assert module["peft"]["class_path"] == "peft.LoraConfig" and module["peft"]["init_args"]["r"] == 16
    assert config["trainer"]["strategy"]["init_args"]["generator"] == "vllm"
