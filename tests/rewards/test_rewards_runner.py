"""RewardRunner: weighted sums, breakdown and metric names, and the failure policy."""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections.abc import Iterator

import pytest

from rlforge.errors import ConfigError, RewardError
from rlforge.rewards import MathReward, RewardResult, RewardRunner, ThinkingReward


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown so deliberately stuck rewards return and their threads exit."""
    event = threading.Event()
    yield event
    event.set()


def batch(n: int) -> tuple[list[str], list[str], list[str]]:
    prompts = [f"{i}+{i}?" for i in range(n)]
    responses = [f"<think>{i} and {i}</think> #### {2 * i}" for i in range(n)]
    targets = [str(2 * i) for i in range(n)]
    return prompts, responses, targets


def fails_on(indices: set[int], exc: Exception) -> object:
    def flaky(prompt: str, response: str, target: str) -> float:
        if int(target) // 2 in indices:
            raise exc
        return 1.0

    return flaky


def test_weighted_sum_breakdown_and_metrics() -> None:
    runner = RewardRunner([MathReward(), ThinkingReward()], weights=[1.0, 0.25])
    prompts, responses, targets = batch(4)
    responses[3] = "#### 7"  # wrong and no thinking block
    result = runner(prompts, responses, targets)
    assert isinstance(result, RewardResult)
    assert result.rewards == [1.25, 1.25, 1.25, 0.0]
    assert result.breakdown[0] == {"math": 1.0, "thinking": 1.0}
    assert result.breakdown[3] == {"math": 0.0, "thinking": 0.0}
    assert result.metrics == {"reward/errors": 0.0, "reward/math_mean": 0.75, "reward/thinking_mean": 0.75}
    assert result.errors == []


def test_duplicate_names_get_suffixes() -> None:
    runner = RewardRunner([MathReward(), MathReward(format_bonus=0.5)])
    result = runner(["q"], ["#### 3"], ["4"])
    assert result.breakdown == [{"math": 0.0, "math_2": 0.5}]
    assert set(result.metrics) == {"reward/errors", "reward/math_mean", "reward/math_2_mean"}


@pytest.mark.parametrize("timeout_s", [5.0, None])
def test_exception_scores_zero_and_is_counted(timeout_s: float | None) -> None:
    runner = RewardRunner([fails_on({3}, ZeroDivisionError("boom"))], timeout_s=timeout_s, max_error_frac=0.1)
    result = runner(*batch(10))
    assert result.rewards == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert result.metrics["reward/errors"] == 1.0
    assert result.metrics["reward/flaky_mean"] == pytest.approx(0.9)
    assert result.errors == ["flaky sample 3: ZeroDivisionError: boom"]


@pytest.mark.parametrize("bad", ["1.0", None, float("nan"), float("inf"), [1.0]])
def test_non_numeric_or_non_finite_values_are_errors(bad: object) -> None:
    def returns_bad(prompt: str, response: str, target: str) -> object:
        return bad if target == "0" else 1

    result = RewardRunner([returns_bad], max_error_frac=0.5)(*batch(2))
    assert result.rewards == [0.0, 1.0]
    assert result.metrics["reward/errors"] == 1.0


def test_bools_and_numpy_scalars_are_numbers() -> None:
    np = pytest.importorskip("numpy")
    result = RewardRunner([lambda p, r, t: True, lambda p, r, t: np.float32(0.5)])(*batch(1))
    assert result.rewards == [1.5]
    assert result.breakdown == [{"lambda": 1.0, "lambda_2": 0.5}]


def test_timeout_scores_zero_and_returns_in_about_timeout_s(release: threading.Event) -> None:
    def stuck_on_first(prompt: str, response: str, target: str) -> float:
        if target == "0":
            release.wait(30)
        return 1.0

    runner = RewardRunner([stuck_on_first], timeout_s=0.3, max_error_frac=0.5)
    start = time.perf_counter()
    result = runner(*batch(6))
    elapsed = time.perf_counter() - start
    assert 0.25 < elapsed < 1.5
    assert result.rewards == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert result.metrics["reward/errors"] == 1.0
    assert "TimeoutError" in result.errors[0]
    # the stuck worker was replaced: the next batch runs at full speed
    start = time.perf_counter()
    assert runner(*batch(6)[:2], ["2"] * 6).rewards == [1.0] * 6
    assert time.perf_counter() - start < 0.25


def test_several_timeouts_run_concurrently(release: threading.Event) -> None:
    runner = RewardRunner([lambda p, r, t: release.wait(30)], timeout_s=0.3, max_error_frac=1.0, num_workers=4)
    start = time.perf_counter()
    result = runner(*batch(4))
    assert time.perf_counter() - start < 1.5
    assert result.metrics["reward/errors"] == 4.0


def test_over_max_error_frac_raises_one_line() -> None:
    runner = RewardRunner([MathReward(), fails_on({1, 2}, RuntimeError("missing\nkey"))], max_error_frac=0.1)
    with pytest.raises(RewardError) as info:
        runner(*batch(10))
    message = str(info.value)
    assert "\n" not in message
    assert "'flaky'" in message
    assert "20.0%" in message and "max_error_frac=0.1" in message
    assert message.endswith("first error: RuntimeError: missing key")


def test_persistent_timeouts_abort_early(release: threading.Event) -> None:
    runner = RewardRunner([lambda p, r, t: release.wait(30)], timeout_s=0.2, max_error_frac=0.1, num_workers=2)
    start = time.perf_counter()
    with pytest.raises(RewardError, match="'lambda' failed on at least 2 of 16 samples.*TimeoutError"):
        runner(*batch(16))
    assert time.perf_counter() - start < 1.5  # not 16 x 0.2 s


def test_zero_error_budget() -> None:
    with pytest.raises(RewardError):
        RewardRunner([fails_on({0}, ValueError("x"))], max_error_frac=0.0)(*batch(100))
    assert RewardRunner([fails_on({0}, ValueError("x"))], max_error_frac=1.0)(*batch(1)).rewards == [0.0]


def test_empty_batch_and_length_mismatch() -> None:
    runner = RewardRunner([MathReward()])
    result = runner([], [], [])
    assert result.rewards == [] and result.metrics == {"reward/errors": 0.0, "reward/math_mean": 0.0}
    with pytest.raises(ValueError, match="same length"):
        runner(["a"], ["b", "c"], ["d"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reward_fns": []},
        {"reward_fns": [MathReward()], "weights": [1.0, 2.0]},
        {"reward_fns": [MathReward()], "timeout_s": 0},
        {"reward_fns": [MathReward()], "max_error_frac": 1.5},
        {"reward_fns": [MathReward()], "num_workers": 0},
        {"reward_fns": ["not callable"]},
    ],
)
def test_bad_config(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        RewardRunner(**kwargs)


def test_pickle_and_close() -> None:
    runner = RewardRunner([MathReward()])
    runner(*batch(2))
    clone = pickle.loads(pickle.dumps(runner))
    assert clone(*batch(2)).rewards == [1.0, 1.0]
    runner.close()
    assert runner(*batch(2)).rewards == [1.0, 1.0]  # a closed runner starts new workers


def test_many_samples_are_cheap() -> None:
    runner = RewardRunner([MathReward()])
    prompts, responses, targets = batch(256)
    runner(prompts, responses, targets)
    start = time.perf_counter()
    result = runner(prompts, responses, targets)
    assert time.perf_counter() - start < 1.0
    assert math.isclose(result.metrics["reward/math_mean"], 1.0)


def test_calls_stuck_in_an_aborted_batch_are_reaped_later(release: threading.Event) -> None:
    def blocker(prompt: str, response: str, target: str) -> float:
        if target == "stuck":
            release.wait(30)
        return 1.0

    def raiser(prompt: str, response: str, target: str) -> float:
        if target == "stuck":
            time.sleep(0.05)  # let the blocker start first
            raise RuntimeError("bad sample")
        return 1.0

    runner = RewardRunner([blocker, raiser], timeout_s=0.3, max_error_frac=0.0, num_workers=2)
    start = time.perf_counter()
    with pytest.raises(RewardError, match="'raiser'"):
        runner(["p"], ["r"], ["stuck"])
    assert time.perf_counter() - start < 0.3  # raised before the blocker's time-out
    time.sleep(0.35)
    assert runner(["p"] * 4, ["r"] * 4, ["ok"] * 4).rewards == [2.0] * 4
    pool = runner._pool
    assert pool is not None and pool.abandoned_alive == 1 and len(pool._workers) == 2
