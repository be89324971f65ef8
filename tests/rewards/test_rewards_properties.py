"""Property tests: random, huge and adversarial responses never raise, never take over 1 s, never eval."""

from __future__ import annotations

import builtins
import math
import re
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlforge.rewards import (
    CompositeReward,
    FormatReward,
    LengthPenalty,
    MathReward,
    RewardRunner,
    ThinkingReward,
)

MAX_CALL_S = 1.0

FRAGMENTS = [
    "\\boxed{",
    "\\boxed",
    "\\fbox{",
    "{",
    "}",
    "\\{",
    "\\}",
    "####",
    "#### ",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "The answer is ",
    "answer is:",
    "\\frac",
    "\\sqrt",
    "^{",
    "^",
    "!",
    "10",
    "9",
    "-",
    "$",
    "\\$",
    ",",
    ".",
    "%",
    "\\%",
    "\n",
    " ",
    "\\",
    "\\text{",
    "\\binom{",
    "\\sum",
    "\\infty",
    "x",
    "=",
    "(",
    ")",
    "1+1",
    "__import__('os').system('echo pwned')",
    "eval(",
]

TARGETS = ["72", "-3", "0.5", "\\frac{1}{2}", "1,000", "\\frac{\\sqrt{3}}{2}", "x^2+1", "(1,2)", "", "\\pi"]

HUGE = [
    "\\boxed{" * 15_000,
    "\\boxed{" * 7_000 + "1" + "}" * 7_000,
    "{" * 100_000,
    "}" * 100_000,
    "#### " + "9" * 100_000,
    "#### 9\n" * 15_000,
    "#### " + "(" * 50_000,
    "<answer>" * 12_000 + "</answer>",
    "<answer>1</answer>" * 6_000,
    "The answer is " * 8_000,
    "answer is" + " " * 100_000 + "5",
    "<think>" * 8_000 + "</think>" * 8_000,
    "1," * 50_000,
    "\\frac{" * 15_000,
    "\\boxed{10^{10^{10}}}",
    "The answer is 9^{9^{9^{9}}}.",
    "\\boxed{" + "\\sqrt{" * 40 + "2" + "}" * 41,
    "#### " + "a" * 50_000 + "!",
    "a" * 100_000,
    "\\text{" * 20_000,
    "x" * 99_999 + "\\boxed{72}",
]


def _rewards() -> list[Callable[[str, str, str], float]]:
    return [
        MathReward(math_verify_timeout_s=0.5),
        MathReward(extractors=["answer_is", "answer_tag", "hash", "boxed"], format_bonus=0.1),
        ThinkingReward(),
        FormatReward(r"^<think>.+?</think>\s*\S", fullmatch=False),
        FormatReward(r"(\w+\s?)+$", timeout_s=0.2),  # a catastrophic pattern, bounded by its time limit
        LengthPenalty(max_chars=1000, buffer_chars=200),
        CompositeReward([ThinkingReward(), MathReward(math_verify_timeout_s=0.5)], weights=[0.1, 1.0]),
    ]


REWARDS = _rewards()


@pytest.fixture(scope="module", autouse=True)
def _warm_up() -> None:
    """Pay math-verify's one-time import and parser set-up before anything is timed."""
    REWARDS[0]("", "\\boxed{x+1}", "x^2+1")


def _check_all(response: str, target: str, prompt: str = "") -> None:
    for fn in REWARDS:
        start = time.perf_counter()
        value = fn(prompt, response, target)
        elapsed = time.perf_counter() - start
        assert isinstance(value, float) and math.isfinite(value), (fn, value)
        assert elapsed < MAX_CALL_S, f"{type(fn).__name__} took {elapsed:.2f}s on {response[:80]!r}"


PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(response=st.text(max_size=500), target=st.sampled_from(TARGETS))
def test_random_text(response: str, target: str) -> None:
    _check_all(response, target)


@PROPERTY_SETTINGS
@given(
    response=st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join),
    target=st.sampled_from(TARGETS),
    prompt=st.lists(st.sampled_from(FRAGMENTS), max_size=10).map("".join),
)
def test_adversarial_fragments(response: str, target: str, prompt: str) -> None:
    _check_all(response, target, prompt)


@PROPERTY_SETTINGS
@given(response=st.text(max_size=200), target=st.text(max_size=30))
def test_random_targets(response: str, target: str) -> None:
    _check_all("\\boxed{" + response + "}", target)
    _check_all("#### " + response, target)


@pytest.mark.parametrize("response", HUGE, ids=range(len(HUGE)))
def test_huge_and_pathological(response: str) -> None:
    _check_all(response, "72")
    _check_all(response, "x^2+1")


def test_nothing_is_evaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model text reaches eval/exec; expressions such as ``1+1`` are not answers.

    sympy itself evals its own code templates and, inside latex2sympy, ``Number("123")`` on a NUMBER
    token of the LaTeX grammar (digits and dots only); none of the response's text gets there.
    """
    seen: list[str] = []
    real_eval, real_exec = builtins.eval, builtins.exec

    def spy(real: Callable[..., object]) -> Callable[..., object]:
        def record(code: object, *args: object, **kwargs: object) -> object:
            if isinstance(code, str):  # compiled code objects are module imports (importlib), not text
                seen.append(code)
            return real(code, *args, **kwargs)

        return record

    monkeypatch.setattr(builtins, "eval", spy(real_eval))
    monkeypatch.setattr(builtins, "exec", spy(real_exec))
    hostile = [
        "#### __import__('os').system('echo canary')",
        "\\boxed{__import__('os').system('echo canary')}",
        "<answer>exec('canary')</answer>",
        "The answer is eval('canary').",
        "\\boxed{canary(1)+1}",
        "\\boxed{1+1}",
        "#### 1+1",
    ]
    for response in hostile:
        for target in ("2", "x+1", "\\frac{\\sqrt{2}}{2}"):
            for fn in REWARDS:
                fn("", response, target)
            for fn in (REWARDS[0], REWARDS[1]):  # the answer checkers: an expression is not an answer
                assert fn("", response, target) <= 0.1  # format_bonus at most
    for code in seen:
        assert not re.search(r"canary|__import__|system|\bos\b|1\s*\+\s*1", code), code


@settings(max_examples=15, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(
    responses=st.lists(
        st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)),
        min_size=1,
        max_size=16,
    ),
    target=st.sampled_from(TARGETS),
)
def test_runner_never_raises_on_model_output(responses: list[str], target: str) -> None:
    runner = _RUNNER
    n = len(responses)
    start = time.perf_counter()
    result = runner([""] * n, responses, [target] * n)
    assert time.perf_counter() - start < MAX_CALL_S * 2
    assert result.metrics["reward/errors"] == 0.0
    assert len(result.rewards) == n and all(math.isfinite(r) for r in result.rewards)


_RUNNER = RewardRunner(REWARDS, timeout_s=MAX_CALL_S, max_error_frac=0.0)
