"""Built-in synthetic tasks: deterministic, disjoint splits in GSM8K answer format."""

from __future__ import annotations

import random
import re

import pytest

from rlforge.data.tasks import TASKS, TaskSplits, extract_answer, make_task
from rlforge.errors import ConfigError


@pytest.mark.parametrize("name", sorted(TASKS))
def test_deterministic_and_pure(name: str) -> None:
    state = random.getstate()
    first, second = make_task(name), make_task(name, seed=0)
    assert random.getstate() == state  # the global RNG is never used
    assert isinstance(first, TaskSplits) and first.name == name
    assert first.train == second.train and first.val == second.val
    assert make_task(name, seed=1).val != first.val


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_disjoint(name: str) -> None:
    # guess_number's prompt is the same for every row (the number is hidden): its rows differ in the target
    splits = make_task(name)
    val_rows = {(r["prompt"], r["target"]) for r in splits.val}
    assert len(val_rows) == len(splits.val) >= 20
    assert not val_rows & {(r["prompt"], r["target"]) for r in splits.train}


def test_addition_pairs_are_disjoint_and_cover_the_domain() -> None:
    pairs = lambda rows: {tuple(map(int, re.findall(r"\d+", r["prompt"]))) for r in rows}
    for digits, total in [(1, 100), (2, 8100)]:
        splits = make_task("addition", digits=digits)
        train, val = pairs(splits.train), pairs(splits.val)
        assert not train & val and len(train | val) == total
        for row in splits.val:
            a, b = map(int, re.findall(r"\d+", row["prompt"]))
            assert str(a + b) == row["target"]
    assert len(make_task("addition", digits=1).val) == 30


@pytest.mark.parametrize("name", sorted(TASKS))
def test_row_format(name: str) -> None:
    splits = make_task(name)
    for row in splits.train[:200] + splits.val:
        assert set(row) == {"prompt", "target", "solution"}
        assert row["prompt"].startswith("Q: ") and row["prompt"].endswith(("?\nA:", ".\nA:"))
        assert row["solution"] == f" #### {row['target']}"
        assert extract_answer(row["prompt"] + row["solution"]) == row["target"]
        assert row["target"].isdigit() and not (len(row["target"]) > 1 and row["target"][0] == "0")


def test_examples() -> None:
    reverse = make_task("reverse").val[0]
    assert reverse["target"] == re.search(r"\d{4}", reverse["prompt"]).group()[::-1]
    largest = make_task("max").val[0]
    assert largest["target"] == max(re.findall(r"\d", largest["prompt"]))
    assert len(make_task("reverse", num_train=50).train) == 50


def test_extract_answer() -> None:
    assert extract_answer(" #### 132") == "132"
    assert extract_answer("so ####1,234 done") == "1234"
    assert extract_answer(" #### -7\nQ: #### 9") == "-7"
    assert extract_answer("no marker 8") is None
    assert extract_answer("#### ") is None


def test_unknown_name_and_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="addition, guess_number, max, reverse, tool_multiply"):
        make_task("subtraction")
    with pytest.raises(ConfigError, match="digits"):
        make_task("addition", digits=3)
    with pytest.raises(ConfigError, match="num_val"):
        make_task("addition", digits=1, num_val=100)
    with pytest.raises(ConfigError, match="bogus"):
        make_task("max", bogus=1)


def test_tool_multiply_rows() -> None:
    splits = make_task("tool_multiply")
    pairs = lambda rows: {tuple(map(int, re.findall(r"\d+", r["prompt"]))) for r in rows}
    train, val = pairs(splits.train), pairs(splits.val)
    assert len(val) == 200 and not train & val and len(train | val) == 900 * 90
    for row in splits.val:
        a, b = map(int, re.fullmatch(r"Q: What is (\d{3}) \* (\d{2})\?\nA:", row["prompt"]).groups())
        assert row["target"] == str(a * b)
    assert len(make_task("tool_multiply", num_train=10).train) == 10


def test_guess_number_rows_hide_disjoint_numbers() -> None:
    splits = make_task("guess_number")
    train, val = ({int(r["target"]) for r in rows} for rows in (splits.train, splits.val))
    assert len(val) == 20 and not train & val and train | val == set(range(1, 51))
    assert {r["prompt"] for r in splits.train + splits.val} == {"Q: Guess my number from 1 to 50.\nA:"}
    small = make_task("guess_number", high=10, num_val=3)
    assert {int(r["target"]) for r in small.train + small.val} == set(range(1, 11))
    assert "1 to 10" in small.val[0]["prompt"]
    with pytest.raises(ConfigError, match="high"):
        make_task("guess_number", high=1)
