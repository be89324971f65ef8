"""ThinkingReward, FormatReward, LengthPenalty, CompositeReward and reward naming."""

from __future__ import annotations

import functools
import pickle
import threading

import pytest

from rlforge.errors import ConfigError
from rlforge.rewards import (
    CompositeReward,
    FormatReward,
    LengthPenalty,
    MathReward,
    ThinkingReward,
    reward_name,
    unique_reward_names,
)


@pytest.mark.parametrize(
    ("prompt", "response", "expected"),
    [
        ("", "<think>reasoning</think> #### 4", 1.0),
        ("", "  \n<think>\nreasoning\n</think>\nThe answer is 4.", 1.0),
        ("", "<think>reasoning</think>", 0.0),  # nothing after the block
        ("", "<think>reasoning</think>   \n", 0.0),
        ("", "<think>   \n </think> #### 4", 0.0),  # empty block
        ("", "<think></think> #### 4", 0.0),
        ("", "<think>reasoning #### 4", 0.0),  # unclosed
        ("", "reasoning</think> #### 4", 0.0),  # stray closing tag
        ("", "</think><think>x #### 4", 0.0),
        ("", "<think>a</think><think>b</think> #### 4", 0.0),  # two blocks
        ("", "<think>a<think>b</think>c</think> #### 4", 0.0),  # nested
        ("", "<think>a</think> #### 4 </think>", 0.0),
        ("", "preamble <think>a</think> #### 4", 0.0),  # block not first
        ("", "#### 4", 0.0),
        ("", "", 0.0),
        ("<|im_start|>assistant\n<think>\n", "reasoning</think> #### 4", 1.0),  # opened by the template
        ("<|im_start|>assistant\n<think>\n", "<think>reasoning</think> #### 4", 0.0),
        ("<|im_start|>assistant\n<think>\n", "  </think> #### 4", 0.0),
    ],
)
def test_thinking_reward(prompt: str, response: str, expected: float) -> None:
    assert ThinkingReward()(prompt, response, "4") == expected


def test_thinking_custom_tags_and_config() -> None:
    assert ThinkingReward("<reasoning>", "</reasoning>", reward=0.5)("", "<reasoning>x</reasoning> y", "") == 0.5
    with pytest.raises(ConfigError):
        ThinkingReward("<t>", "<t>")


def test_format_reward() -> None:
    fmt = FormatReward(r"<think>.+</think>\s*\S", reward=0.5)
    assert fmt("", "<think>a\nb</think> ok", "") == 0.5  # DOTALL by default
    assert fmt("", "no tags", "") == 0.0
    full = FormatReward(r"#### \d+", fullmatch=True)
    assert full("", "#### 12", "") == 1.0
    assert full("", "x #### 12", "") == 0.0
    assert FormatReward("ANSWER", flags=["IGNORECASE"])("", "answer", "") == 1.0


def test_format_reward_bad_config() -> None:
    with pytest.raises(ConfigError, match=r"\(unclosed"):
        FormatReward("(unclosed")
    with pytest.raises(ConfigError, match="flags"):
        FormatReward("a", flags=["NOPE"])


def test_format_reward_catastrophic_pattern_times_out() -> None:
    import time

    fmt = FormatReward(r"^(a|aa)+$", timeout_s=0.2)
    start = time.perf_counter()
    assert fmt("", "a" * 5000 + "!", "") == 0.0
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (110, -1.5), (120, -2.0), (121, -2.0), (10_000, -2.0)],
)
def test_length_penalty_ramp(length: int, expected: float) -> None:
    # max 120, ramp over the last 40 characters, full penalty 2.0
    assert LengthPenalty(max_chars=120, buffer_chars=40, coef=2.0)("", "x" * length, "") == pytest.approx(expected)


def test_length_penalty_cliff_and_config() -> None:
    cliff = LengthPenalty(max_chars=10)
    assert cliff("", "x" * 10, "") == 0.0
    assert cliff("", "x" * 11, "") == -1.0
    for kwargs in ({"max_chars": 0}, {"max_chars": 10, "buffer_chars": 11}, {"max_chars": 10, "coef": -1.0}):
        with pytest.raises(ConfigError):
            LengthPenalty(**kwargs)


def test_composite_reward() -> None:
    comp = CompositeReward([MathReward(), ThinkingReward(), MathReward()], weights=[1.0, 0.5, 2.0])
    assert comp.names == ["math", "thinking", "math_2"]
    assert comp.last_scores == {}
    assert comp("", "<think>2+2</think> #### 4", "4") == pytest.approx(3.5)
    assert comp.last_scores == {"math": 1.0, "thinking": 1.0, "math_2": 1.0}
    assert comp("", "#### 5", "4") == 0.0
    assert comp.last_scores == {"math": 0.0, "thinking": 0.0, "math_2": 0.0}
    assert CompositeReward([ThinkingReward()])("", "<think>a</think>b", "") == 1.0


def test_composite_last_scores_are_per_thread() -> None:
    comp = CompositeReward([ThinkingReward()])
    comp("", "<think>a</think>b", "")
    seen: dict[str, float] = {"unset": -1.0}
    thread = threading.Thread(target=lambda: seen.update(comp.last_scores or {"empty": 0.0}))
    thread.start()
    thread.join()
    assert seen == {"unset": -1.0, "empty": 0.0}
    assert comp.last_scores == {"thinking": 1.0}
    assert pickle.loads(pickle.dumps(comp)).names == ["thinking"]


def test_composite_bad_config() -> None:
    with pytest.raises(ConfigError, match="weights has 1 entries but rewards has 2"):
        CompositeReward([MathReward(), ThinkingReward()], weights=[1.0])
    with pytest.raises(ConfigError):
        CompositeReward([])


def my_custom_reward(prompt: str, response: str, target: str) -> float:
    return 0.0


class HTTPJudgeReward:
    def __call__(self, prompt: str, response: str, target: str) -> float:
        return 0.0


class Named:
    name = "judge"

    def __call__(self, prompt: str, response: str, target: str) -> float:
        return 0.0


def test_reward_names() -> None:
    assert reward_name(MathReward()) == "math"
    assert reward_name(ThinkingReward()) == "thinking"
    assert reward_name(LengthPenalty(10)) == "length_penalty"
    assert reward_name(FormatReward("x")) == "format"
    assert reward_name(HTTPJudgeReward()) == "http_judge"
    assert reward_name(Named()) == "judge"
    assert reward_name(my_custom_reward) == "my_custom_reward"
    assert reward_name(functools.partial(my_custom_reward, "p")) == "my_custom_reward"
    assert reward_name(lambda p, r, t: 0.0) == "lambda"
    assert unique_reward_names([MathReward(), MathReward(), Named(), MathReward()]) == [
        "math",
        "math_2",
        "judge",
        "math_3",
    ]
