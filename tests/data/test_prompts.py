"""Prompt datasets (GSM8K/MATH formats), seeded held-out splits, one-line data errors, chat templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlforge.data import RLDataModule, extract_target, load_prompt_rows
from rlforge.errors import ConfigError, DataError
from rlforge.rewards import MathReward
from tests.helpers import fast_flags, metric_rows

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "samples"
GSM8K, MATH = SAMPLES / "gsm8k_sample.jsonl", SAMPLES / "math_sample.jsonl"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sample_files_are_what_the_script_writes(tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, str(REPO / "scripts" / "make_sample_data.py"), "--out", str(tmp_path)], check=True)
    for path in (GSM8K, MATH):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("path", "fmt", "solution_field", "known"),
    [
        (GSM8K, "gsm8k", "answer", {"19", "2208"}),  # "#### 2,208" loses its comma
        (MATH, "math", "solution", {"\\frac{23}{6}", "\\frac{11\\sqrt{6}}{6}", "6\\sqrt{6}", "26"}),
    ],
)
def test_sample_targets_are_extracted_and_score_the_gold_solution(path, fmt, solution_field, known):
    data = RLDataModule(dataset=str(path), target_format=fmt, batch_size=4)
    data.setup()
    raw = _raw(path)
    assert len(data.train_rows) == len(raw) == 40 and data.val_dataset() == []  # val_split unused for a file
    question_field = "question" if fmt == "gsm8k" else "problem"
    assert [row["prompt"] for row in data.train_rows] == [r[question_field] for r in raw]
    targets = [row["target"] for row in data.train_rows]
    assert known <= set(targets)
    assert fmt == "gsm8k" or any(t.startswith("-\\frac{") for t in targets)
    reward = MathReward()
    assert all(reward("", r[solution_field], t) == 1.0 for r, t in zip(raw, targets, strict=True))
    assert len(data.next_batch()) == 4


def test_extract_target_takes_the_last_answer():
    assert extract_target("a #### 3\nb\n#### 1,234,567 \n", "gsm8k") == "1234567"
    text = r"First \boxed{1}, then $\boxed{\frac{\sqrt{3}}{2}}$ and \boxed{\{1, 2\}}."
    assert extract_target(text, "math") == r"\{1, 2\}"
    assert extract_target(r"\boxed{\frac{a}{b}} done", "math") == r"\frac{a}{b}"
    assert extract_target("no marker", "gsm8k") is None and extract_target(r"\boxed{}", "math") is None
    assert extract_target(" 42 ", "plain") == " 42 "


def test_val_fraction_is_seeded_and_disjoint():
    def split(seed: int) -> tuple[list, list]:
        data = RLDataModule(dataset=str(GSM8K), target_format="gsm8k", val_fraction=0.2, seed=seed)
        data.setup()
        return data.train_rows, data.val_rows

    train, val = split(0)
    assert len(val) == 8 and len(train) == 32
    prompts = [row["prompt"] for row in train + val]
    assert len(set(prompts)) == 40 and set(prompts) == {r["question"] for r in _raw(GSM8K)}
    assert split(0) == (train, val)
    assert split(1)[1] != val
    capped = RLDataModule(dataset=str(GSM8K), target_format="gsm8k", val_fraction=0.2, max_train_rows=5, val_size=3)
    capped.setup()
    assert capped.train_rows == train[:5] and capped.val_rows == val[:3]


def test_resume_position_set_before_setup():
    full = RLDataModule(dataset=str(MATH), target_format="math", batch_size=7, seed=3)
    full.setup()
    batches = [full.next_batch() for _ in range(8)]
    resumed = RLDataModule(dataset=str(MATH), target_format="math", batch_size=7, seed=3)
    resumed.load_state_dict({"epoch": 0, "index": 35})  # 5 batches in, restored before setup like a checkpoint
    resumed.setup()
    assert [resumed.next_batch() for _ in range(3)] == batches[5:]


@pytest.mark.parametrize(
    ("bad_row", "fmt", "field", "needle"),
    [
        ({"question": "Q?"}, "gsm8k", "'answer'", "missing field"),
        ({"question": ["Q?"], "answer": "#### 1"}, "gsm8k", "'question'", "must be a string"),
        ({"question": "Q?", "answer": "it is 4"}, "gsm8k", "'answer'", "####"),
        ({"problem": "P?", "solution": "so $x = 3$."}, "math", "'solution'", "boxed"),
        ({"problem": "P?", "solution": {"text": "x"}}, "math", "'solution'", "got dict"),
    ],
)
def test_malformed_rows_are_one_line(tmp_path, bad_row, fmt, field, needle):
    good = _raw(GSM8K if fmt == "gsm8k" else MATH)[0]
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad_row) + "\n")
    with pytest.raises(DataError) as err:
        RLDataModule(dataset=str(path), target_format=fmt).setup()
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert str(path) in message and "row 1" in message and field in message and needle in message


def test_hub_dataset_without_network_is_one_line(monkeypatch):
    import datasets

    calls = []

    def offline(path, name=None, split=None, streaming=False, **kwargs):
        calls.append((path, name, split, streaming))
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nsecond line")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        RLDataModule(dataset="openai/gsm8k", dataset_config="main", target_format="gsm8k").setup()
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "openai/gsm8k" in message and "network or the HF cache" in message
    assert calls == [("openai/gsm8k", "main", "train", False)]


def test_hub_dataset_loads_train_and_val_splits(monkeypatch):
    import datasets

    splits = {"train": _raw(GSM8K)[:30], "test": _raw(GSM8K)[30:]}
    calls = []

    def fake_hub(path, name=None, split=None, streaming=False, **kwargs):
        calls.append((path, name, split, streaming))
        return iter(splits[split])

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    data = RLDataModule(
        dataset="openai/gsm8k", dataset_config="main", target_format="gsm8k", val_size=4, streaming=True
    )
    data.setup()
    assert len(data.train_rows) == 30 and len(data.val_rows) == 4
    assert calls == [("openai/gsm8k", "main", "train", True), ("openai/gsm8k", "main", "test", True)]


def test_invalid_data_config_is_a_config_error():
    with pytest.raises(ConfigError, match="plain, gsm8k, math"):
        RLDataModule(dataset=str(GSM8K), target_format="gsm8K")
    with pytest.raises(ConfigError, match="val_fraction"):
        RLDataModule(dataset=str(GSM8K), val_fraction=1.0)
    with pytest.raises(ConfigError, match="only one of `dataset` and `train_file`"):
        RLDataModule(dataset=str(GSM8K), train_file=str(GSM8K))
    assert load_prompt_rows(str(GSM8K), target_format="gsm8k", limit=3)[2]["target"] == "30"


def test_chat_template_encoding(tiny_policy_dir):
    from transformers import AutoTokenizer

    from rlforge.grpo import GRPOModule

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    plain = GRPOModule(model=tiny_policy_dir)
    plain.tokenizer = tokenizer
    assert plain.encode_prompt("Q: 1+1?") == tokenizer("Q: 1+1?", add_special_tokens=False)["input_ids"]

    module = GRPOModule(model=tiny_policy_dir, chat_template=True, system_prompt="Answer after ####.")
    module.tokenizer = tokenizer
    with pytest.raises(ConfigError, match="module.chat_template false"):
        module.encode_prompt("Q: 1+1?")
    tokenizer.chat_template = CHATML
    ids = module.encode_prompt("Q: 1+1?")
    rendered = "<|im_start|>system\nAnswer after ####.<|im_end|>\n<|im_start|>user\nQ: 1+1?<|im_end|>\n"
    expected = tokenizer(rendered + "<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert type(ids) is list and all(type(i) is int for i in ids) and ids == expected

    with pytest.raises(ConfigError, match="chat_template true"):
        GRPOModule(model=tiny_policy_dir, system_prompt="hi")


def test_fit_on_a_gsm8k_file_with_a_carved_val_split(tiny_policy_dir, tmp_path):
    from rlforge.cli import run

    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__val_check_interval=2, data__val_size=2)
    run(["fit", *flags, "--data.dataset", str(GSM8K), "--data.target_format", "gsm8k", "--data.val_fraction", "0.2"])
    assert len(metric_rows(tmp_path)) == 2
    assert metric_rows(tmp_path, "val/accuracy")


def test_gsm8k_qwen3_config_parses_offline():
    from rlforge.cli import build_parser

    config = build_parser().parse_args(["fit", "--config", str(REPO / "configs" / "grpo_gsm8k_qwen3_1_7b.yaml")])
    module, data = config.fit.module.init_args, config.fit.data
    assert module.model == "Qwen/Qwen3-1.7B" and module.chat_template and "####" in module.system_prompt
    assert (data.dataset, data.dataset_config, data.target_format) == ("openai/gsm8k", "main", "gsm8k")
