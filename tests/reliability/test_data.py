"""Bad data files, overlong prompts and SFT data: one line naming file and row (exit 2), never a traceback or a hang.

The CLI cases run ``python -m rlforge.cli`` in a real subprocess on real files, as a user would.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlforge.data import RLDataModule
from rlforge.data.files import read_local_file
from rlforge.data.sft import SFTDataModule
from rlforge.errors import DataError
from tests.helpers import fast_flags, metric_rows

REPO = Path(__file__).resolve().parents[2]
GOOD = {"prompt": "Q: What is 1 + 1?\nA:", "target": "2", "solution": " #### 2"}


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def _cli(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rlforge.cli", *args]
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _cli_all(runs: list[list[str]], cwd: Path, timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Runs several CLI commands at once (each pays the torch import; together they overlap)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rlforge.cli", *args],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in runs
    ]
    done = []
    for args, proc in zip(runs, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The single ``rlforge: error:`` line of a run that exited 2, holding every needle."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlforge: error:"), proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _sft_flags(policy: str, root: Path) -> list[str]:
    return [
        "--module.model", policy,
        "--trainer.max_steps", "1",
        "--trainer.default_root_dir", str(root),
        "--trainer.enable_progress_bar", "false",
        "--trainer.val_check_interval", "0",
        "--data.batch_size", "2",
    ]  # fmt: skip


# Each bad file: (name, bytes, what the message must say besides the file name).
BAD_FILES = {
    "non_utf8": (b'{"prompt": "Q: 1+1?", "target": "2"}\n{"prompt": "Q: caf\xe9", "target": "2"}\n', "row 1 (line 2)"),
    "truncated": (b'{"prompt": "Q: 1+1?", "target": "2"}\n{"prompt": "Q: 2+2?", "tar', "row 1 (line 2)"),
    "empty": (b"", "empty"),
}


CASES = ("non_utf8", "truncated", "empty", "empty_target")


def _bad_file(tmp_path: Path, case: str, sft: bool) -> tuple[Path, str]:
    """A file with defect ``case`` (for ``rlforge sft`` when ``sft``) and what its error must name."""
    path = tmp_path / f"{case}{'_sft' if sft else ''}.jsonl"
    if case == "empty_target":  # was `KeyError: 'plain'` for fit
        content, needle = (json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "target": ""}) + "\n").encode(), "row 1"
    else:
        content, needle = BAD_FILES[case]
        if sft:
            content = content.replace(b'"target": "2"', b'"target": "2", "solution": " #### 2"')
    path.write_bytes(content)
    return path, needle


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["fit", "sft"])
def test_a_bad_jsonl_is_one_line_naming_file_and_row(stage, tiny_policy_dir, tmp_path):
    files = [_bad_file(tmp_path, case, stage == "sft") for case in CASES]
    flags = fast_flags(tiny_policy_dir, tmp_path / "run") if stage == "fit" else _sft_flags(tiny_policy_dir, tmp_path)
    procs = _cli_all([[stage, *flags, "--data.train_file", str(path)] for path, _ in files], cwd=tmp_path)
    for case, (path, needle), proc in zip(CASES, files, procs, strict=True):
        line = _one_line_error(proc, str(path), needle)
        assert case != "empty_target" or "'target' is empty" in line


def test_json_and_parquet_defects_name_file_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    array = tmp_path / "rows.json"
    array.write_text(json.dumps([GOOD, GOOD]))
    assert read_local_file(array) == [GOOD, GOOD]
    array.write_bytes(b'[{"prompt": "a", "target": "1"},\n {"prompt": "b\xff", "target": "2"}]')
    with pytest.raises(DataError, match=r"rows\.json: line 2: not valid UTF-8"):
        read_local_file(array)
    array.write_text(json.dumps([GOOD, GOOD])[:-20])
    with pytest.raises(DataError, match=r"rows\.json: line 1: invalid JSON"):
        read_local_file(array)
    array.write_text(json.dumps([GOOD, "just text"]))
    with pytest.raises(DataError, match=r"rows\.json: row 1: expected a JSON object"):
        read_local_file(array)
    lines = tmp_path / "lines.json"  # JSON Lines saved as .json, as HF datasets reads it
    lines.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)[:-3] + "\n")
    with pytest.raises(DataError, match=r"lines\.json: row 1 \(line 2\): invalid JSON.*truncated"):
        read_local_file(lines)

    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"prompt": ["Q: 1+1?", "Q: 2+2?"], "target": ["2", ""]}), parquet)
    with pytest.raises(DataError, match=r"rows\.parquet: row 1: field 'target' is empty"):
        RLDataModule(train_file=str(parquet)).setup()
    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "target": pa.array([], pa.string())}), parquet)
    with pytest.raises(DataError, match=r"rows\.parquet: no rows"):
        RLDataModule(train_file=str(parquet)).setup()
    parquet.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"rows\.parquet: cannot be read as parquet"):
        SFTDataModule(train_file=str(parquet)).setup()


# ------------------------------------------------------------------------------ overlong prompts (case 14)
@pytest.mark.slow
def test_a_1mb_prompt_is_refused_before_generation(tiny_policy_dir, tmp_path):
    path = tmp_path / "huge.jsonl"
    huge = {"prompt": "Q: " + "1 + " * 250_000 + "1?\nA:", "target": "2"}  # 1 MB; it used to hang the run
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(huge) + "\n")
    proc = _cli("fit", *fast_flags(tiny_policy_dir, tmp_path / "run"), "--data.train_file", str(path), cwd=tmp_path)
    _one_line_error(proc, str(path), "row 1", "'prompt'", "max_position_embeddings 256", "data.overlong_prompts")


def _tokens(tiny_policy_dir: str, text: str) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(tiny_policy_dir)(text, add_special_tokens=False)["input_ids"])


@pytest.mark.slow
def test_prompt_that_leaves_no_room_for_the_response_is_refused(tiny_policy_dir, tmp_path):
    # fits in the 256 positions alone, but not with the 5 new tokens fast_flags samples
    prompt = next(p for k in range(1, 200) if _tokens(tiny_policy_dir, p := "Q: " + "1 + " * k + "1?") > 251)
    assert _tokens(tiny_policy_dir, prompt) <= 256
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({"prompt": prompt, "target": "2"}) + "\n")
    proc = _cli("fit", *fast_flags(tiny_policy_dir, tmp_path / "run"), "--data.train_file", str(path), cwd=tmp_path)
    _one_line_error(proc, str(path), "row 1", "tokens long", "over the limit of 251", "max_new_tokens 5")


def test_skip_drops_overlong_prompts_and_counts_them(tiny_policy_dir, tmp_path):
    from rlforge.cli import run

    path = tmp_path / "mixed.jsonl"
    prompts = ["Q: 1 + 1?", "Q: " + "1 + " * 30 + "1?", "Q: 2 + 2?", "Q: " + "1 + " * 40 + "1?"]
    path.write_text("".join(json.dumps({"prompt": p, "target": "2"}) + "\n" for p in prompts))
    limit = 20
    expected = sum(_tokens(tiny_policy_dir, p) > limit for p in prompts)
    assert expected == 2
    flags = fast_flags(tiny_policy_dir, tmp_path, data__max_prompt_tokens=limit, data__overlong_prompts="skip")
    with pytest.warns(UserWarning, match="skipped 2 prompts longer than 20 tokens"):
        run(["fit", *flags, "--data.train_file", str(path)])
    (row,) = metric_rows(tmp_path, "data/skipped_prompts")
    assert float(row["data/skipped_prompts"]) == expected and row["step"] == "1"
    with pytest.raises(DataError, match=r"mixed\.jsonl: row 1: .*over the limit of 20 prompt tokens"):
        run(
            [
                "fit",
                *fast_flags(tiny_policy_dir, tmp_path / "err", data__max_prompt_tokens=limit),
                "--data.train_file",
                str(path),
            ]
        )


# --------------------------------------------------------------------------------- rlforge plot (case 15)
def test_plot_names_a_non_numeric_metrics_cell(tmp_path):
    pytest.importorskip("matplotlib")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerows([["step", "rollout/reward_mean", "train/kl"], [1, 0.5, 0.1], [2, "oops", 0.2]])
    proc = _cli("plot", str(run_dir), cwd=tmp_path)
    _one_line_error(proc, str(run_dir / "metrics.csv"), "line 3", "'rollout/reward_mean'", "'oops'")


# --------------------------------------------------------------------------------- SFT data (case 20)
def test_sft_and_rl_data_blocks_share_their_options():
    import inspect

    rl = inspect.signature(RLDataModule.__init__).parameters
    sft = inspect.signature(SFTDataModule.__init__).parameters
    assert set(rl) <= set(sft) and set(sft) - set(rl) == {"completion_field"}


def _addition_as_gsm8k(path: Path, rows: list[dict[str, str]]) -> None:
    """The built-in addition rows in GSM8K's layout: a worked answer ending in ``#### N``."""
    with open(path, "w") as f:
        for row in rows:
            a, b = re.findall(r"\d+", row["prompt"])
            f.write(
                json.dumps({"question": row["prompt"], "answer": f"{a} + {b} = {row['target']}\n#### {row['target']}"})
                + "\n"
            )


def _greedy_accuracy(policy: str, rows: list[dict[str, str]], max_new_tokens: int) -> float:
    """Reference: plain transformers greedy decoding, answer = the number after ``####``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(policy), AutoModelForCausalLM.from_pretrained(policy).eval()
    correct = 0
    for row in rows:
        ids = torch.tensor([tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        found = re.search(r"####\s*(-?\d+)", tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
        correct += bool(found and found.group(1) == row["target"])
    return correct / len(rows)


def test_sft_on_gsm8k_rows_extracts_the_target(tmp_path):
    from rlforge.cli import run
    from rlforge.data.tasks import make_task
    from rlforge.models import resolve_model_path

    splits = make_task("addition")
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    _addition_as_gsm8k(train, splits.train[:64])
    _addition_as_gsm8k(val, splits.val[:50])
    flags = [
        "--trainer.max_steps",
        "1",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
    ]
    run(["sft", *flags, "--data.train_file", str(train), "--data.val_file", str(val), "--data.target_format", "gsm8k"])
    accuracy = [float(r["val/accuracy"]) for r in metric_rows(tmp_path, "val/accuracy")]
    reference = _greedy_accuracy(str(resolve_model_path("rlforge/default-policy")), splits.val[:50], 16)
    assert reference > 0.2  # the shipped policy answers a third of these right
    assert accuracy[0] == pytest.approx(reference, abs=0.021)  # step 0: the shipped policy, before any update


def test_sft_defaults_keep_the_shipped_policy_accuracy(tmp_path):
    from rlforge.cli import run

    flags = ["--trainer.max_steps", "3", "--trainer.val_check_interval", "1", "--data.val_size", "100"]
    run(["sft", *flags, "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"])
    accuracy = [float(r["val/accuracy"]) for r in metric_rows(tmp_path, "val/accuracy")]
    assert len(accuracy) == 4 and accuracy[0] > 0.2
    assert min(accuracy[1:]) >= accuracy[0] - 0.05  # lr 1e-3 without warm-up: 0.34 -> 0.01 after one step
