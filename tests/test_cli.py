"""`rlforge fit|validate`: config round trip, the embedded default config, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlforge.cli import main
from tests.helpers import fast_flags, metric_rows

REPO = Path(__file__).resolve().parents[1]


def _fast_flags(policy: str, root: Path) -> list[str]:
    return fast_flags(policy, root, trainer__val_check_interval=2, data__batch_size=3, data__val_size=4)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _losses(root: Path) -> list[str]:
    return [row["train/loss"] for row in metric_rows(root)]


def test_print_config_round_trip_reproduces_the_run(tiny_policy_dir, tmp_path, capsys):
    code, printed, _ = _cli(["fit", *_fast_flags(tiny_policy_dir, tmp_path / "a"), "--print_config"], capsys)
    assert code == 0
    config_file = tmp_path / "config.yaml"
    config_file.write_text(printed)
    assert yaml.safe_load(printed)["trainer"]["max_steps"] == 2

    assert _cli(["fit", *_fast_flags(tiny_policy_dir, tmp_path / "a")], capsys)[0] == 0
    assert (
        _cli(["fit", "--config", str(config_file), "--trainer.default_root_dir", str(tmp_path / "b")], capsys)[0] == 0
    )
    first, second = _losses(tmp_path / "a"), _losses(tmp_path / "b")
    assert len(first) == 2 and first == second

    (manifest,) = (tmp_path / "b").glob("rlforge/version_*/run.json")
    run = json.loads(manifest.read_text())
    assert run["seed"] == 0 and run["config"]["module"]["init_args"]["group_size"] == 3
    assert {"torch", "transformers", "python"} <= set(run["versions"]) and "cpu_count" in run["hardware"]


def test_default_config_file_is_what_fit_runs(capsys):
    """configs/default.yaml is exactly the embedded default (`rlforge fit` with no arguments)."""
    code, printed, _ = _cli(["fit", "--print_config"], capsys)
    assert code == 0
    assert yaml.safe_load(printed) == yaml.safe_load((REPO / "configs" / "default.yaml").read_text())


def test_console_script_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "rlforge.cli", "fit", "--help"], capture_output=True, text=True, check=True
    )
    assert "--trainer.max_steps" in out.stdout and "--module" in out.stdout


def test_unknown_config_key_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_stepz: 3\n")
    code, _, err = _cli(["fit", "--config", str(bad)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "max_stepz" in err


def test_bad_values_are_one_line(tiny_policy_dir, tmp_path, capsys):
    for flags, needle in (
        (["--module.sampling.max_new_tokens", "0"], "max_new_tokens"),
        (["--module.group_size", "1"], "group size 1"),
    ):
        code, _, err = _cli(["fit", *_fast_flags(tiny_policy_dir, tmp_path), *flags], capsys)
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and needle in err


def test_missing_dataset_field_names_file_row_field(tiny_policy_dir, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "Q: 1+1?", "target": "2"}\n{"prompt": "Q: 2+2?", "answer": "4"}\n')
    code, _, err = _cli(["fit", *_fast_flags(tiny_policy_dir, tmp_path), "--data.train_file", str(data)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert str(data) in err and "row 1" in err and "'target'" in err


@pytest.mark.parametrize("stage", ["validate"])
def test_validate_reports_accuracy(tiny_policy_dir, tmp_path, capsys, stage):
    from rlforge.cli import run

    metrics = run([stage, *_fast_flags(tiny_policy_dir, tmp_path)])
    assert set(metrics) == {"val/accuracy", "val/pass@1", "val/pass@4"} and 0.0 <= metrics["val/accuracy"] <= 1.0
