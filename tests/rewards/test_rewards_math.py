"""MathReward: a table of equivalent forms and gaming attempts, plus extraction/normalisation units."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlforge.errors import ConfigError
from rlforge.rewards import (
    MathReward,
    extract_answer_is,
    extract_answer_tag,
    extract_boxed,
    extract_hash,
    is_too_costly,
    normalize_answer,
    parse_number,
    strip_thinking,
)

# (response, target, expected score); the prompt is "" unless the case says otherwise.
CASES = [
    # --- equivalent forms of one half
    (r"So \boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    ("#### 1/2", "0.5", 1.0),
    ("#### 1/2", r"\frac{1}{2}", 1.0),
    (r"\boxed{\dfrac{1}{2}}", "1/2", 1.0),
    (r"\boxed{\frac12}", "0.5", 1.0),
    (r"\boxed{\tfrac{2}{4}}", "0.5", 1.0),
    ("#### .5", "0.5", 1.0),
    # --- decimals, integers, signs
    ("#### 2.50", "2.5", 1.0),
    ("#### 2.5", "2.50", 1.0),
    ("#### 72.0", "72", 1.0),
    ("#### 72.", "72", 1.0),
    ("#### 072", "72", 1.0),
    ("#### -5", "-5", 1.0),
    ("#### -5", "5", 0.0),
    ("#### 5", "-5", 0.0),
    ("#### \u22125", "-5", 1.0),
    (r"\boxed{-\frac{3}{4}}", "-0.75", 1.0),
    (r"\boxed{\frac{-3}{4}}", "-0.75", 1.0),
    ("#### (-5)", "-5", 1.0),
    ("#### +7", "7", 1.0),
    ("#### 0.333", r"\frac{1}{3}", 0.0),
    # --- thousands separators, currency, percent, units
    ("#### 1,000", "1000", 1.0),
    ("#### 1000", "1,000", 1.0),
    ("#### 1,234,567", "1234567", 1.0),
    (r"\boxed{1\,234\,567}", "1234567", 1.0),
    ("#### 7 2", "72", 0.0),
    ("#### 1/ 2", "0.5", 1.0),
    (r"\boxed{1{,}000}", "1000", 1.0),
    ("#### $1,200", "1200", 1.0),
    (r"\boxed{\$18}", "18", 1.0),
    ("#### 18 dollars", "18", 1.0),
    (r"\boxed{18 \text{ dollars}}", "18", 1.0),
    ("#### 5 cm", "5", 1.0),
    ("#### 5cm", "5", 1.0),
    (r"\boxed{25\%}", "25", 1.0),
    ("#### 25%", "25", 1.0),
    ("#### 25 percent", "25", 1.0),
    ("#### 25%", "0.25", 0.0),
    (r"\boxed{90^\circ}", "90", 1.0),
    ("#### **42**", "42", 1.0),
    (r"\boxed{\text{42}}", "42", 1.0),
    ("#### x = 5", "5", 1.0),
    # --- boxed: nested braces, several boxes (last wins), truncated box
    (r"\boxed{\frac{3}{4}}", "0.75", 1.0),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}", 1.0),
    (r"First \boxed{3}, on reflection \boxed{4}.", "4", 1.0),
    (r"First \boxed{4}, on reflection \boxed{3}.", "4", 0.0),
    (r"\boxed{\boxed{7}}", "7", 1.0),
    (r"The answer is \boxed{7", "7", 0.0),
    (r"\fbox{12}", "12", 1.0),
    (r"\boxed{}", "0", 0.0),
    # --- symbolic targets (math-verify)
    (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", 1.0),
    (r"\boxed{x^2+1}", "1+x^2", 1.0),
    (r"\boxed{(1,2)}", "(1, 2)", 1.0),
    (r"\boxed{\pi}", r"\pi", 1.0),
    (r"\boxed{2\pi}", r"\pi", 0.0),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1.0),
    # --- answer tags and "The answer is"
    ("<answer>42</answer>", "42", 1.0),
    ("<ANSWER> 42 </ANSWER>", "42", 1.0),
    (r"<answer>\frac{1}{2}</answer>", "0.5", 1.0),
    ("<answer>42", "42", 0.0),
    ("The answer is 42.", "42", 1.0),
    ("So the answer is: 3.5.", "3.5", 1.0),
    ("The answer is $1,000$, done.", "1000", 1.0),
    ("The answer is 5. Wait, no: the answer is 6.", "6", 1.0),
    ("Final Answer: The final answer is $\\frac{14}{3}$. I hope it is correct.", r"\frac{14}{3}", 1.0),
    # --- extractor order: boxed beats #### by default
    ("\\boxed{7}\n#### 8", "7", 1.0),
    ("\\boxed{7}\n#### 8", "8", 0.0),
    # --- gaming attempts: must all score 0
    ("#### 172", "72", 0.0),
    ("#### 720", "72", 0.0),
    ("I think it is 72 but #### 71", "72", 0.0),
    ("72", "72", 0.0),
    ("The result: 72", "72", 0.0),
    ("#### 3\n#### 4", "4", 0.0),
    ("#### 4\n#### 3", "4", 0.0),
    ("#### 4\n#### 4", "4", 1.0),
    ("#### 0.5\n#### 1/2", "0.5", 1.0),
    ("<answer>3</answer><answer>4</answer>", "4", 0.0),
    ("#### 3 or 4", "4", 0.0),
    ("#### 4 or 5", "4", 0.0),
    ("#### 3, 4", "4", 0.0),
    ("#### 1+1", "2", 0.0),
    ("#### 2*1", "2", 0.0),
    (r"\boxed{\sqrt{4}}", "2", 0.0),
    ("#### __import__('os').system('true')", "0", 0.0),
    ("#### eval('2')", "2", 0.0),
    ("<think>the answer is #### 72</think>\n#### 71", "72", 0.0),
    ("<think>\\boxed{72}</think> \\boxed{71}", "72", 0.0),
    ("<think>so #### 72 ... still thinking", "72", 0.0),
    ("", "72", 0.0),
    ("   \n  ", "72", 0.0),
    ("#### ", "72", 0.0),
    (r"\boxed{10^{10^{10}}}", "x", 0.0),
    # --- a number written as a power is evaluated exactly (its size is bounded first)
    (r"\boxed{2^{10}}", "1024", 1.0),
    (r"\boxed{2^{10}}", "1025", 0.0),
    (r"\boxed{3 \times 10^{5}}", "300000", 1.0),
    (r"\boxed{(-2)^{3}}", "-8", 1.0),
    (r"\boxed{10^{-2}}", "0.01", 1.0),
    ("#### 1024", r"2^{10}", 1.0),
    (r"\boxed{2^{100000}}", "1", 0.0),
    ("#### 72", "", 0.0),
]


@pytest.fixture(scope="module")
def reward() -> MathReward:
    # The table checks equivalence, not speed: a loaded machine can push a cold sympy comparison past the 1 s
    # default deadline (which scores 0, by design; tested on its own).
    return MathReward(math_verify_timeout_s=60.0)


@pytest.mark.parametrize(("response", "target", "expected"), CASES)
def test_math_reward_table(reward: MathReward, response: str, target: str, expected: float) -> None:
    assert reward("", response, target) == expected


def test_table_size() -> None:
    assert len(CASES) >= 60


def test_only_the_response_is_parsed(reward: MathReward) -> None:
    few_shot = "Q: 36+36?\nA: #### 72\nQ: 40+31?\nA:"
    assert reward(few_shot, "I am not sure.", "72") == 0.0
    # a generator that returns prompt + completion: the echoed prompt is dropped before parsing
    assert reward(few_shot, few_shot + " I am not sure.", "72") == 0.0
    assert reward(few_shot, few_shot + " #### 71", "71") == 1.0


def test_qwen3_style_thinking_opened_in_prompt(reward: MathReward) -> None:
    assert reward("<think>", "2+2 is 4 </think> #### 4", "4") == 1.0
    assert reward("<think>", "#### 4 </think> #### 5", "4") == 0.0
    assert reward("<|im_start|>assistant\n<think>\n", "so #### 4, still thinking", "4") == 0.0
    assert reward("<|im_start|>assistant\n", "#### 4", "4") == 1.0


def test_format_bonus_only_for_one_wrong_answer() -> None:
    reward = MathReward(format_bonus=0.1)
    assert reward("", "#### 5", "4") == 0.1
    assert reward("", "#### 4", "4") == 1.0
    assert reward("", "no answer here", "4") == 0.0
    assert reward("", "#### 3\n#### 5", "4") == 0.0  # hedging earns nothing
    assert MathReward()("", "#### 5", "4") == 0.0


def test_extractor_order_is_configurable() -> None:
    text = "\\boxed{7}\n#### 8"
    assert MathReward(extractors=["hash", "boxed"])("", text, "8") == 1.0
    assert MathReward(extractors=["boxed"])("", "#### 8", "8") == 0.0
    assert MathReward(unique_answer_formats=[])("", "#### 3\n#### 4", "4") == 1.0


def test_strip_thinking_can_be_disabled() -> None:
    assert MathReward(strip_thinking=False)("", "<think>\n#### 72\n</think>", "72") == 1.0
    assert MathReward()("", "<think>\n#### 72\n</think>", "72") == 0.0


def test_long_answers_score_zero() -> None:
    assert MathReward(max_answer_chars=5)("", "#### 123456", "123456") == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"extractors": ["boxed", "latex"]},
        {"extractors": []},
        {"unique_answer_formats": ["nope"]},
        {"format_bonus": 1.0},
        {"format_bonus": -0.1},
        {"max_answer_chars": 0},
        {"math_verify_timeout_s": 0},
    ],
)
def test_bad_config(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        MathReward(**kwargs)


def test_extractors() -> None:
    assert extract_boxed(r"a \boxed{1} b \boxed{\frac{2}{3}} c \boxed{4") == ["1", r"\frac{2}{3}"]
    assert extract_boxed(r"\boxed{\{1,2\}}") == [r"\{1,2\}"]
    assert extract_boxed(r"\boxed{a \boxed{b}}") == [r"a \boxed{b}"]
    assert extract_boxed("} \\boxed { 5 }") == [" 5 "]
    assert extract_hash("#### 1\n##### 2\n####3") == ["1", "3"]
    assert extract_answer_tag("<answer>a</answer><answer>b") == ["a"]
    assert extract_answer_is("The answer is 3.5. Then the answer is 1,000, yes") == ["3.5", "1,000"]
    assert strip_thinking("<think>x</think>y</think>z") == "z"
    assert strip_thinking("<think>never closed") == ""
    assert strip_thinking("plain") == "plain"


def test_normalize_and_parse_number() -> None:
    assert normalize_answer(r" $\$1{,}000.$ ") == "1000"
    assert normalize_answer(r"\text{5 apples}") == "5"
    assert normalize_answer("5 or 6") == "5 or 6"
    assert normalize_answer("x" * 300) == ""
    assert parse_number(r"-\frac{6}{8}") == Fraction(-3, 4)
    assert parse_number("1/0") is None
    assert parse_number("1e5") is None
    assert parse_number("1" * 61) is None


@pytest.mark.parametrize(
    ("answer", "costly"),
    [
        (r"10^{10^{10}}", True),
        ("2^{100000}", True),
        (r"(((9^{200})^{200})^{200})^{200}", True),  # each exponent small, the result 9^(1.6e9)
        (r"9^{9^{9^{9}}}", True),
        ("2^{1000}", False),  # cost, not syntax: a 1000-bit integer is cheap
        (r"2^{2^{3}}", False),
        (r"\binom{999999}{5}", True),
        ("(999)!", True),
        (r"\sum_{i=1}^{n} i", True),
        ("9" * 61, True),
        ("2^{100}", False),
        ("5!", False),
        (r"\frac{\sqrt{3}}{2}", False),
    ],
)
def test_is_too_costly(answer: str, costly: bool) -> None:
    assert is_too_costly(answer, closed_form=True) is costly


def test_intervals_with_infinity(reward: MathReward) -> None:
    assert reward("", r"\boxed{(-\infty, 2) \cup (3, \infty)}", r"(-\infty,2)\cup(3,\infty)") == 1.0
    assert reward("", r"\boxed{(-\infty, 2]}", r"(-\infty, 2)") == 0.0


def test_a_timed_out_comparison_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    # A comparison cut short (a busy machine) scores 0 that once; the next identical call compares again.
    import rlforge.rewards.math as math_reward
    from rlforge.rewards._deadline import DeadlineExceeded

    real, calls = math_reward.call_with_deadline, []

    def first_call_times_out(fn, seconds):
        calls.append(seconds)
        if len(calls) == 1:
            raise DeadlineExceeded(f"exceeded {seconds}s")
        return real(fn, seconds)

    monkeypatch.setattr(math_reward, "call_with_deadline", first_call_times_out)
    reward = MathReward(math_verify_timeout_s=37.0)  # a timeout no other test uses: a cache key of its own
    assert reward("q", r"\boxed{3y+21}", "3(y+7)") == 0.0
    assert reward("q", r"\boxed{3y+21}", "3(y+7)") == 1.0
    assert reward("q", r"\boxed{3y+21}", "3(y+7)") == 1.0
    assert calls == [37.0, 37.0]  # the verdict of the second call was cached
