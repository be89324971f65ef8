"""`rlforge sft`: masked-prompt cross-entropy, packing, accumulation, and a checkpoint that `fit` runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlforge.cli import run
from rlforge.data.sft import IGNORE_INDEX, collate_sft, tokenize_example
from rlforge.models import load_policy
from tests.helpers import fast_flags, metric_rows


def _sft_flags(policy: str, root, **overrides) -> list[str]:
    flags = {
        "trainer__max_steps": 60,
        "trainer__default_root_dir": str(root),
        "trainer__enable_progress_bar": "false",
        "trainer__val_check_interval": 60,
        "data__val_size": 40,
        "data__batch_size": 16,
        "module__model": policy,
        "module__lr": 3e-3,
        **overrides,
    }
    return [item for key, value in flags.items() for item in (f"--{key.replace('__', '.')}", str(value))]


def test_sft_lowers_heldout_loss_and_checkpoint_runs_in_fit(tiny_policy_dir, tmp_path):
    run(["sft", *_sft_flags(tiny_policy_dir, tmp_path / "sft")])
    val = [float(r["val/loss"]) for r in metric_rows(tmp_path / "sft", "val/loss")]
    assert len(val) == 2 and val[-1] < 0.5 * val[0]
    policy = tmp_path / "sft" / "rlforge" / "version_0" / "checkpoints" / "step-000060" / "policy"
    run(["fit", *fast_flags(str(policy), tmp_path / "rl")])
    assert len(metric_rows(tmp_path / "rl")) == 2


def test_gradient_accumulation_equals_full_batch(tiny_policy_dir, tmp_path):
    run(["sft", *_sft_flags(tiny_policy_dir, tmp_path / "a", trainer__max_steps=3, trainer__val_check_interval=0)])
    run(
        [
            "sft",
            *_sft_flags(
                tiny_policy_dir,
                tmp_path / "b",
                trainer__max_steps=3,
                trainer__val_check_interval=0,
                module__micro_batch_size=5,
            ),
        ]
    )
    full = [float(r["train/loss"]) for r in metric_rows(tmp_path / "a")]
    accumulated = [float(r["train/loss"]) for r in metric_rows(tmp_path / "b")]
    torch.testing.assert_close(torch.tensor(accumulated), torch.tensor(full), rtol=1e-5, atol=1e-6)


def test_prompt_tokens_are_masked_and_packing_keeps_labels(tiny_policy_dir):
    _, tokenizer = load_policy(tiny_policy_dir)
    prompt = tokenizer("Q: What is 3 + 5?\nA:", add_special_tokens=False)["input_ids"]
    ids, labels = tokenize_example(tokenizer, prompt, " #### 8", max_length=64)
    assert labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert labels[len(prompt) :] == ids[len(prompt) :] and ids[-1] == tokenizer.eos_token_id

    examples = [(ids, labels)] * 3
    padded = collate_sft(examples, tokenizer.pad_token_id, packing=False, max_length=64)
    packed = collate_sft(examples, tokenizer.pad_token_id, packing=True, max_length=64)
    assert len(padded) == 3 and len(packed) == 1
    assert packed.num_label_tokens == padded.num_label_tokens
    assert packed.position_ids[0, len(ids)] == 0  # positions restart at each packed document
    assert packed.labels[0, len(ids)] == IGNORE_INDEX  # nothing is predicted across a document boundary


def test_malformed_sft_row_is_one_line(tiny_policy_dir, tmp_path, capsys):
    from rlforge.cli import main

    data = tmp_path / "sft.jsonl"
    data.write_text('{"prompt": "Q: 1+1?", "solution": " #### 2"}\n{"prompt": "Q: 2+2?", "solution": ["4"]}\n')
    try:
        main(["sft", *_sft_flags(tiny_policy_dir, tmp_path), "--data.train_file", str(data)])
    except SystemExit as exit_:
        assert exit_.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(data) in err and "row 1" in err and "'solution'" in err


def test_gpu_sft_config_parses():
    from rlforge.cli import build_parser

    config_file = Path(__file__).resolve().parents[1] / "configs" / "sft_qwen3.yaml"
    config = build_parser().parse_args(["sft", "--config", str(config_file)])
    assert config.sft.module.init_args.model == "Qwen/Qwen3-1.7B" and config.sft.data.val_split == "test"


def test_unreachable_hub_dataset_is_one_clear_error(monkeypatch):
    import datasets

    from rlforge.data.sft import SFTDataModule
    from rlforge.errors import DataError

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        DataError, match=r"openai/gsm8k config 'main' split 'train': cannot load hub dataset \(needs network"
    ):
        SFTDataModule(task=None, train_file="openai/gsm8k", dataset_config="main").setup()


def test_plain_text_sft_trains_on_every_token(tiny_policy_dir, tmp_path):
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(f'{{"text": "The quick brown fox {i} jumps over the lazy dog."}}\n' for i in range(20)))
    flags = _sft_flags(tiny_policy_dir, tmp_path, trainer__max_steps=2, trainer__val_check_interval=0)
    run(
        [
            "sft",
            *flags,
            "--data.train_file",
            str(data),
            "--data.prompt_field",
            "",
            "--data.completion_field",
            "text",
            "--data.batch_size",
            "4",
        ]
    )
    rows = metric_rows(tmp_path)
    assert len(rows) == 2 and float(rows[0]["train/loss"]) > 0
